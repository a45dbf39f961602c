// Package node_test checks the node image's deployment examples: the
// DaemonSet against the Kubernetes API types, the Marathon app against a
// typed app definition, both strictly (a misspelt field fails), the default
// configuration against nodeinit's own validation, and the nodeinit flags
// each example passes against the real binary.
package node_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// gracePeriod is the --shutdown-grace-period in args, else the default config's.
func gracePeriod(t *testing.T, args []string) time.Duration {
	t.Helper()
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--shutdown-grace-period="); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("%s: %v", a, err)
			}
			return d
		}
	}
	c, err := config.Load("config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c.ShutdownGracePeriod.Duration
}

// checkFlags runs the real nodeinit with the image's ENTRYPOINT flags plus
// args and --write-flags: unknown or conflicting flags fail here, not on a node.
func checkFlags(t *testing.T, args []string) {
	t.Helper()
	nodeinit := testenv.Build(t, "./cmd/nodeinit")
	// --write-flags first: after a "--" in args it would be the kubelet's,
	// and nodeinit would run for real.
	cmd := exec.Command(nodeinit, append([]string{"--config=config.yaml", "--write-flags"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("nodeinit --config=config.yaml --write-flags %s: %v\n%s", strings.Join(args, " "), err, out.Bytes())
	}
	if !strings.Contains(out.String(), "/usr/local/bin/kubelet") || !strings.Contains(out.String(), "/usr/local/bin/kube-proxy") {
		t.Errorf("--write-flags does not show the kubelet and kube-proxy command lines:\n%s", out.Bytes())
	}
}

func TestDefaultConfigIsValid(t *testing.T) {
	c, err := config.Load("config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if errs := c.Validate(); len(errs) > 0 {
		t.Fatalf("config.yaml is invalid: %v", errs)
	}
}

func TestDaemonSet(t *testing.T) {
	data, err := os.ReadFile("daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(data, &ds); err != nil {
		t.Fatalf("daemonset.yaml is not a valid apps/v1 DaemonSet: %v", err)
	}
	if ds.APIVersion != "apps/v1" || ds.Kind != "DaemonSet" {
		t.Errorf("daemonset.yaml is %s %s, want apps/v1 DaemonSet", ds.APIVersion, ds.Kind)
	}
	if sel := ds.Spec.Selector; sel == nil || !subset(sel.MatchLabels, ds.Spec.Template.Labels) {
		t.Errorf("the selector %v does not match the pod labels %v", sel, ds.Spec.Template.Labels)
	}
	pod := ds.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want the node container only", len(pod.Containers))
	}
	node := pod.Containers[0]
	if len(node.Command) != 0 {
		t.Errorf("command %q replaces the image's nodeinit ENTRYPOINT; use args", node.Command)
	}
	if sc := node.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Error("the node container is not privileged")
	}
	if !slices.Contains(node.Args, "--make-rshared") {
		t.Errorf("args %q lack --make-rshared", node.Args)
	}
	if !pod.HostPID {
		t.Error("hostPID is false; the manifest explains why the kubelet needs the host's pids")
	}
	if node.LivenessProbe == nil || node.LivenessProbe.HTTPGet == nil {
		t.Error("no HTTP liveness probe")
	}
	grace := gracePeriod(t, node.Args)
	if tg := pod.TerminationGracePeriodSeconds; tg == nil || time.Duration(*tg)*time.Second <= 2*grace {
		t.Errorf("terminationGracePeriodSeconds %v is not above twice nodeinit's grace period %v", tg, grace)
	}

	mounts := map[string]corev1.VolumeMount{}
	for _, m := range node.VolumeMounts {
		mounts[m.MountPath] = m
	}
	hostPaths := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	for path, want := range map[string]struct {
		propagation corev1.MountPropagationMode
		readOnly    bool
	}{
		"/var/lib/kubelet":    {propagation: corev1.MountPropagationBidirectional},
		"/sys/fs/cgroup":      {},
		"/var/log":            {}, // the kubelet's /var/log/pods and /var/log/containers
		"/dev":                {},
		"/run":                {propagation: corev1.MountPropagationHostToContainer}, // the CRI socket, the lock file
		"/lib/modules":        {readOnly: true},
		"/var/lib/containerd": {readOnly: true}, // the runtime's root, for the eviction manager
		"/etc/machine-id":     {readOnly: true}, // the host's: the node is the host
		"/tmp":                {},               // pods' hostPath /tmp: the kubelet's is the runtime's
	} {
		m, ok := mounts[path]
		if !ok {
			t.Errorf("%s is not mounted", path)
			continue
		}
		if hostPaths[m.Name] != path {
			t.Errorf("%s comes from volume %q (host path %q), want the host's %s", path, m.Name, hostPaths[m.Name], path)
		}
		if want.propagation != "" && (m.MountPropagation == nil || *m.MountPropagation != want.propagation) {
			t.Errorf("%s has propagation %v, want %s", path, m.MountPropagation, want.propagation)
		}
		if m.ReadOnly != want.readOnly {
			t.Errorf("%s is read-only: %v, want %v", path, m.ReadOnly, want.readOnly)
		}
	}
	// The node's own kubelet hands over through its lock file: the pod's
	// kubelet takes the same lock, and does not exit when another opens it.
	if !slices.Contains(node.Args, "--lock-file=/run/lock/kubelet.lock") || slices.Contains(node.Args, "--exit-on-lock-contention") {
		t.Errorf("args %q: want the kubelet's --lock-file=/run/lock/kubelet.lock without --exit-on-lock-contention", node.Args)
	}
	checkFlags(t, node.Args)
}

// marathonApp is the part of a Marathon app definition the example uses,
// typed as Marathon documents it, so a misspelt or misplaced field fails.
type marathonApp struct {
	ID                         string              `json:"id"`
	Instances                  int                 `json:"instances"`
	Cpus                       float64             `json:"cpus"`
	Mem                        float64             `json:"mem"`
	Args                       []string            `json:"args"`
	Env                        map[string]string   `json:"env"`
	Container                  marathonContainer   `json:"container"`
	Networks                   []marathonNetwork   `json:"networks"`
	PortDefinitions            *[]marathonPort     `json:"portDefinitions"`
	TaskKillGracePeriodSeconds int                 `json:"taskKillGracePeriodSeconds"`
	HealthChecks               []marathonHealth    `json:"healthChecks"`
	Constraints                [][]string          `json:"constraints"`
	UpgradeStrategy            *marathonUpgrade    `json:"upgradeStrategy"`
	Labels                     map[string]string   `json:"labels"`
	Fetch                      []map[string]string `json:"fetch"`
}

type marathonContainer struct {
	Type    string           `json:"type"`
	Docker  *marathonDocker  `json:"docker"`
	Volumes []marathonVolume `json:"volumes"`
}

type marathonDocker struct {
	Image          string              `json:"image"`
	Privileged     bool                `json:"privileged"`
	ForcePullImage bool                `json:"forcePullImage"`
	Parameters     []marathonParameter `json:"parameters"`
}

type marathonParameter struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type marathonVolume struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	Mode          string `json:"mode"`
}

type marathonNetwork struct {
	Mode string `json:"mode"`
	Name string `json:"name,omitempty"`
}

type marathonPort struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	Name     string `json:"name"`
}

type marathonHealth struct {
	Protocol               string `json:"protocol"`
	Path                   string `json:"path"`
	Port                   int    `json:"port"`
	PortIndex              *int   `json:"portIndex"`
	GracePeriodSeconds     int    `json:"gracePeriodSeconds"`
	IntervalSeconds        int    `json:"intervalSeconds"`
	TimeoutSeconds         int    `json:"timeoutSeconds"`
	MaxConsecutiveFailures int    `json:"maxConsecutiveFailures"`
}

type marathonUpgrade struct {
	MinimumHealthCapacity float64 `json:"minimumHealthCapacity"`
	MaximumOverCapacity   float64 `json:"maximumOverCapacity"`
}

func TestMarathonApp(t *testing.T) {
	data, err := os.ReadFile("marathon.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var app marathonApp
	if err := dec.Decode(&app); err != nil {
		t.Fatalf("marathon.json is not a valid Marathon app: %v", err)
	}
	if dec.More() {
		t.Fatal("marathon.json holds more than one JSON value")
	}
	if app.ID == "" || app.Instances < 1 || app.Cpus <= 0 || app.Mem <= 0 {
		t.Errorf("id %q, instances %d, cpus %v, mem %v: all are required", app.ID, app.Instances, app.Cpus, app.Mem)
	}
	// The Docker containerizer runs it, in the engine's cgroup: nodeinit
	// stays there and hands that cgroup to the kubelet, which it can only
	// find in the host's hierarchies with the host's cgroup namespace.
	if app.Container.Type != "DOCKER" || app.Container.Docker == nil || app.Container.Docker.Image == "" {
		t.Fatalf("container %+v, want type DOCKER with an image", app.Container)
	}
	if !app.Container.Docker.Privileged {
		t.Error("the container is not privileged")
	}
	for _, p := range []marathonParameter{
		{"cgroupns", "host"},
		{"pid", "host"}, // as the DaemonSet's hostPID: cAdvisor maps pod cgroups' host pids
		// Marathon volumes have no propagation: the kubelet's volume
		// mounts reach the host through a docker volume parameter.
		{"volume", "/var/lib/kubelet:/var/lib/kubelet:rshared"},
	} {
		if !slices.Contains(app.Container.Docker.Parameters, p) {
			t.Errorf("docker parameters %v lack %s=%s", app.Container.Docker.Parameters, p.Key, p.Value)
		}
	}
	for _, want := range []marathonVolume{
		{"/sys/fs/cgroup", "/sys/fs/cgroup", "RW"},
		{"/var/log", "/var/log", "RW"},
		{"/dev", "/dev", "RW"},
		// The CRI socket and the xtables lock: a file volume whose host
		// file is missing becomes a directory under docker -v.
		{"/run", "/run", "RW"},
		{"/lib/modules", "/lib/modules", "RO"},
		{"/tmp", "/tmp", "RW"}, // pods' hostPath /tmp: the kubelet's is the runtime's
	} {
		if !slices.Contains(app.Container.Volumes, want) {
			t.Errorf("volumes %v lack the host's %s %s", app.Container.Volumes, want.HostPath, want.Mode)
		}
	}
	for _, v := range app.Container.Volumes {
		if v.Mode != "RW" && v.Mode != "RO" {
			t.Errorf("volume %s has mode %q, want RW or RO", v.ContainerPath, v.Mode)
		}
		if v.ContainerPath == "/var/lib/kubelet" {
			t.Errorf("/var/lib/kubelet is a Marathon volume, which cannot be rshared")
		}
	}
	// A private mount namespace would hide the kubelet's volume mounts from
	// the container runtime outside it.
	if slices.Contains(app.Args, "--private-mountns") {
		t.Errorf("args %q have --private-mountns", app.Args)
	}
	if app.PortDefinitions == nil || len(*app.PortDefinitions) != 0 {
		t.Errorf("portDefinitions %v, want [] (host networking; no port resources)", app.PortDefinitions)
	}
	grace := gracePeriod(t, app.Args)
	if kill := time.Duration(app.TaskKillGracePeriodSeconds) * time.Second; kill <= 2*grace {
		t.Errorf("taskKillGracePeriodSeconds %v is not above twice nodeinit's grace period %v", kill, grace)
	}
	checkFlags(t, app.Args)
}

func subset(a, b map[string]string) bool {
	if len(a) == 0 {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
