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
		{name: "nested container",
			prefix: "mesos", env: map[string]string{EnvMesosDirectory: "/x/runs/p1/containers/c2"},
			cgroup: "/mesos/p1/mesos/c2", id: "c2"},
		{name: "doubly nested container",
			prefix: "mesos", env: map[string]string{EnvMesosDirectory: "/x/runs/p1/containers/c2/containers/c3"},
			cgroup: "/mesos/p1/mesos/c2/mesos/c3", id: "c3"},
		{name: "Docker containerizer name",
			prefix: "mesos", env: map[string]string{EnvMesosContainerName: "mesos-7a1b"}, cgroup: "/mesos/7a1b", id: "7a1b"},
		{name: "Docker containerizer name with agent id",
			prefix: "mesos", env: map[string]string{EnvMesosContainerName: "mesos-20160204-S3.7a1b"}, cgroup: "/mesos/7a1b", id: "7a1b"},
		{name: "MESOS_DIRECTORY wins over MESOS_CONTAINER_NAME",
			prefix: "mesos", env: map[string]string{EnvMesosDirectory: "/x/runs/dir", EnvMesosContainerName: "mesos-name"},
			cgroup: "/mesos/dir", id: "dir"},
		{name: "another prefix",
			prefix: "/mesos-agent/", env: map[string]string{EnvMesosDirectory: "/x/runs/abc"}, cgroup: "/mesos-agent/abc", id: "abc"},
		{name: "nested prefix",
			prefix: "system.slice/mesos", env: map[string]string{EnvMesosDirectory: "/x/runs/abc"}, cgroup: "/system.slice/mesos/abc", id: "abc"},
		{name: "parent wins and keeps the id",
			parent: "/kubepods/node/", prefix: "mesos", env: map[string]string{EnvMesosDirectory: "/x/runs/abc"},
			cgroup: "/kubepods/node", id: "abc"},
		{name: "parent alone", parent: "/node", prefix: "mesos", cgroup: "/node"},
		{name: "relative parent", parent: "node", prefix: "mesos", wantErr: "--cgroup-parent"},
		{name: "parent escaping upwards", parent: "/a/../..", prefix: "mesos", wantErr: "--cgroup-parent"},
		{name: "container name without mesos-",
			prefix: "mesos", env: map[string]string{EnvMesosContainerName: "k8s_pod"}, wantErr: "does not start with mesos-"},
		{name: "empty id in container name",
			prefix: "mesos", env: map[string]string{EnvMesosContainerName: "mesos-agent."}, wantErr: "not a container id"},
		{name: "sandbox of dots",
			prefix: "mesos", env: map[string]string{EnvMesosDirectory: "/x/runs/.."}, wantErr: "not a container id"},
		{name: "sandbox of slashes", prefix: "mesos", env: map[string]string{EnvMesosDirectory: "///"}, wantErr: "names no container"},
		{name: "empty prefix",
			prefix: "", env: map[string]string{EnvMesosDirectory: "/x/runs/abc"}, wantErr: "--mesos-cgroup-prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Discover(tt.parent, tt.prefix, func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Cgroup != tt.cgroup || got.ContainerID != tt.id {
				t.Errorf("got cgroup %q id %q, want %q %q", got.Cgroup, got.ContainerID, tt.cgroup, tt.id)
			}
			if tt.cgroup != "" && got.Source == "" {
				t.Error("no source for the log")
			}
		})
	}
}
