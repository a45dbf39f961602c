package cgroups

import (
	"strings"
	"testing"
)

func TestDiscoverFindsTheCgroup(t *testing.T) {
	tests := []struct {
		name    string
		parent  string
		prefix  string
		env     map[string]string
		cgroup  string
		id      string
		inOwn   bool
		wantErr string
	}{
		{name: "nothing set: stay", prefix: "mesos"},
		{name: "Mesos containerizer sandbox",
			prefix: "mesos", env: map[string]string{EnvMesosDirectory: "/var/lib/mesos/slaves/S1/frameworks/F/executors/E/runs/1f2e3d"},
			cgroup: "/mesos/1f2e3d", id: "1f2e3d"},
		{name: "sandbox with a trailing slash",
			prefix: "mesos", env: map[string]string{EnvMesosDirectory: "/x/runs/abc/"}, cgroup: "/mesos/abc", id: "abc"},
		{name: "sandbox of another shape: last element",
			prefix: "mesos", env: map[string]string{EnvMesosDirectory: "/srv/sandboxes/abc"}, cgroup: "/mesos/abc", id: "abc"},
		{name: "top-level container: MESOS_SANDBOX is MESOS_DIRECTORY",
			prefix: "mesos", env: map[string]string{EnvMesosDirectory: "/x/runs/abc", EnvMesosSandbox: "/x/runs/abc"}, cgroup: "/mesos/abc", id: "abc"},
		{name: "top-level container with a root filesystem: MESOS_SANDBOX names none",
			prefix: "mesos", env: map[string]string{EnvMesosDirectory: "/x/runs/abc", EnvMesosSandbox: "/mnt/mesos/sandbox"}, cgroup: "/mesos/abc", id: "abc"},
		{name: "nested container: MESOS_SANDBOX, no MESOS_DIRECTORY",
			prefix: "mesos", env: map[string]string{EnvMesosSandbox: "/var/lib/mesos/slaves/S1/frameworks/F/executors/E/runs/p1/containers/c2"},
			cgroup: "/mesos/p1/mesos/c2", id: "c2"},
		{name: "doubly nested container",
			prefix: "mesos", env: map[string]string{EnvMesosSandbox: "/x/runs/p1/containers/c2/containers/c3"},
			cgroup: "/mesos/p1/mesos/c2/mesos/c3", id: "c3"},
		{name: "nested container of a debug container: its own MESOS_SANDBOX wins over the inherited MESOS_DIRECTORY",
			prefix: "mesos", env: map[string]string{EnvMesosDirectory: "/x/runs/p1", EnvMesosSandbox: "/x/runs/p1/containers/c2"},
			cgroup: "/mesos/p1/mesos/c2", id: "c2"},
		{name: "nested container under another root: the separator stays mesos",
			prefix: "system.slice/mesos-agent", env: map[string]string{EnvMesosSandbox: "/x/runs/p1/containers/c2"},
			cgroup: "/system.slice/mesos-agent/p1/mesos/c2", id: "c2"},
		{name: "nested sandbox in MESOS_DIRECTORY",
			prefix: "mesos", env: map[string]string{EnvMesosDirectory: "/x/runs/p1/containers/c2"}, cgroup: "/mesos/p1/mesos/c2", id: "c2"},
		{name: "sandbox of a nested container with a root filesystem: nothing",
			prefix: "mesos", env: map[string]string{EnvMesosSandbox: "/mnt/mesos/sandbox"}},
		{name: "top-level MESOS_SANDBOX alone",
			prefix: "mesos", env: map[string]string{EnvMesosSandbox: "/x/runs/abc"}, cgroup: "/mesos/abc", id: "abc"},
		{name: "Docker containerizer name: stays",
			prefix: "mesos", env: map[string]string{EnvMesosContainerName: "mesos-7a1b"}, id: "7a1b", inOwn: true},
		{name: "Docker containerizer name with agent id",
			prefix: "mesos", env: map[string]string{EnvMesosContainerName: "mesos-20160204-S3.7a1b"}, id: "7a1b", inOwn: true},
		{name: "Docker containerizer custom executor with agent id",
			prefix: "mesos", env: map[string]string{EnvMesosContainerName: "mesos-20160204-S3.7a1b.executor"}, id: "7a1b", inOwn: true},
		{name: "Docker containerizer custom executor",
			prefix: "mesos", env: map[string]string{EnvMesosContainerName: "mesos-7a1b.executor"}, id: "7a1b", inOwn: true},
		{name: "Docker name as docker inspect writes it",
			prefix: "mesos", env: map[string]string{EnvMesosContainerName: "/mesos-7a1b"}, id: "7a1b", inOwn: true},
		{name: "a container id that is executor",
			prefix: "mesos", env: map[string]string{EnvMesosContainerName: "mesos-executor"}, id: "executor", inOwn: true},
		{name: "Docker containerizer: MESOS_CONTAINER_NAME wins over the agent's MESOS_DIRECTORY",
			prefix: "mesos", env: map[string]string{EnvMesosDirectory: "/x/runs/7a1b", EnvMesosSandbox: "/mnt/mesos/sandbox", EnvMesosContainerName: "mesos-7a1b"},
			id: "7a1b", inOwn: true},
		{name: "another prefix",
			prefix: "/mesos-agent/", env: map[string]string{EnvMesosDirectory: "/x/runs/abc"}, cgroup: "/mesos-agent/abc", id: "abc"},
		{name: "nested prefix",
			prefix: "system.slice/mesos", env: map[string]string{EnvMesosDirectory: "/x/runs/abc"}, cgroup: "/system.slice/mesos/abc", id: "abc"},
		{name: "parent wins and keeps the id",
			parent: "/kubepods/node/", prefix: "mesos", env: map[string]string{EnvMesosDirectory: "/x/runs/abc"},
			cgroup: "/kubepods/node", id: "abc"},
		{name: "parent wins over the Docker containerizer's cgroup",
			parent: "/node", prefix: "mesos", env: map[string]string{EnvMesosContainerName: "mesos-7a1b"}, cgroup: "/node", id: "7a1b"},
		{name: "parent alone", parent: "/node", prefix: "mesos", cgroup: "/node"},
		{name: "container name without mesos-",
			prefix: "mesos", env: map[string]string{EnvMesosContainerName: "k8s_pod"}, wantErr: "does not start with mesos-"},
		{name: "empty id in container name",
			prefix: "mesos", env: map[string]string{EnvMesosContainerName: "mesos-agent."}, wantErr: "not a container id"},
		{name: "only the executor suffix",
			prefix: "mesos", env: map[string]string{EnvMesosContainerName: "mesos-.executor"}, wantErr: "not a container id"},
		{name: "sandbox of dots",
			prefix: "mesos", env: map[string]string{EnvMesosDirectory: "/x/runs/.."}, wantErr: "not a container id"},
		{name: "nested sandbox of dots",
			prefix: "mesos", env: map[string]string{EnvMesosSandbox: "/x/runs/p/containers/."}, wantErr: "not a container id"},
		{name: "sandbox of slashes", prefix: "mesos", env: map[string]string{EnvMesosDirectory: "///"}, wantErr: "not a container id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := discover(tt.parent, tt.prefix, func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Cgroup != tt.cgroup || got.ContainerID != tt.id || got.InOwn != tt.inOwn {
				t.Errorf("got cgroup %q id %q in its own %v, want %q %q %v", got.Cgroup, got.ContainerID, got.InOwn, tt.cgroup, tt.id, tt.inOwn)
			}
			if (tt.cgroup != "" || tt.inOwn) && got.Source == "" {
				t.Error("no source for the log")
			}
		})
	}
}
