package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// TestAddonManifests decodes flannel's and CoreDNS's objects strictly, as
// the API would take them (a misspelt field fails here, not on a cluster),
// and checks that their pods use only the images loaded into the nodes.
func TestAddonManifests(t *testing.T) {
	kinds := map[string]int{}
	for _, m := range []string{flannelManifest, coreDNSManifest} {
		for doc := range strings.SplitSeq(addonManifest(m), "\n---\n") {
			if strings.Contains(doc, "{{") {
				t.Errorf("a placeholder is left:\n%s", doc)
			}
			var meta struct{ Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatal(err)
			}
			kinds[meta.Kind]++
			var obj any
			var spec *corev1.PodSpec
			switch meta.Kind {
			case "Namespace":
				obj = &corev1.Namespace{}
			case "ServiceAccount":
				obj = &corev1.ServiceAccount{}
			case "ConfigMap":
				obj = &corev1.ConfigMap{}
			case "Service":
				obj = &corev1.Service{}
			case "ClusterRole":
				obj = &rbacv1.ClusterRole{}
			case "ClusterRoleBinding":
				obj = &rbacv1.ClusterRoleBinding{}
			case "DaemonSet":
				ds := &appsv1.DaemonSet{}
				obj, spec = ds, &ds.Spec.Template.Spec
			case "Deployment":
				d := &appsv1.Deployment{}
				obj, spec = d, &d.Spec.Template.Spec
			default:
				t.Fatalf("unexpected kind %q", meta.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Errorf("%s: %v\n%s", meta.Kind, err, doc)
			}
			if spec != nil {
				for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
					if !slices.Contains(loadedImages, c.Image) {
						t.Errorf("container %s uses image %s, which the nodes do not get (%v)", c.Name, c.Image, loadedImages)
					}
				}
			}
			if svc, ok := obj.(*corev1.Service); ok && svc.Spec.ClusterIP != DNSIP {
				t.Errorf("the kube-dns Service's cluster IP is %s, the kubelets' clusterDNS %s", svc.Spec.ClusterIP, DNSIP)
			}
		}
	}
	if kinds["DaemonSet"] != 1 || kinds["Deployment"] != 1 || kinds["Service"] != 1 {
		t.Errorf("kinds %v: want flannel's DaemonSet, CoreDNS's Deployment and the kube-dns Service", kinds)
	}
}

// TestNodeImageConfig checks the node image's files: nodeinit's
// configuration is valid and, with the flags a cluster's node gets, runs
// containerd as its runtime task before the kubelet; containerd's sandbox
// image is the pause image the cluster loads.
func TestNodeImageConfig(t *testing.T) {
	dir := filepath.Join(testenv.ModuleRoot(t), "images", "node-runtime")
	conf := filepath.Join(dir, "config.yaml")
	c, err := config.Load(conf)
	if err != nil {
		t.Fatal(err)
	}
	if errs := c.Validate(); len(errs) > 0 {
		t.Fatalf("%s is invalid: %v", conf, errs)
	}
	cl := &Cluster{Config: Config{Name: "test", Nodes: 1, Subnet: DefaultSubnet}}
	if err := cl.addresses(); err != nil {
		t.Fatal(err)
	}
	args := cl.NodeRunArgs(0)
	flags := args[slices.Index(args, NodeImage)+1:]
	out, err := exec.Command(testenv.Build(t, "./cmd/nodeinit"), append([]string{"--config=" + conf, "--write-flags"}, flags...)...).Output()
	if err != nil {
		t.Fatalf("nodeinit --write-flags %v: %v", flags, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "/usr/local/bin/kubelet ") ||
		!strings.HasPrefix(lines[1], "/usr/local/bin/kube-proxy ") || lines[2] != "/usr/local/bin/containerd --config /etc/containerd/config.toml" {
		t.Errorf("--write-flags: want the kubelet's, kube-proxy's and containerd's command lines:\n%s", out)
	}
	if !strings.Contains(lines[0], "--container-runtime-endpoint=unix:///run/containerd/containerd.sock") ||
		!strings.Contains(lines[1], "--cluster-cidr="+PodCIDR) {
		t.Errorf("the kubelet is not passed containerd's socket, or kube-proxy the cluster CIDR:\n%s", out)
	}
	toml, err := os.ReadFile(filepath.Join(dir, "containerd.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(toml), `sandbox = "`+PauseImage+`"`) || !strings.Contains(string(toml), "SystemdCgroup = false") {
		t.Errorf("containerd.toml does not pin the sandbox image %s with the cgroupfs driver", PauseImage)
	}
}

// TestNodeRunArgs checks each flavor's podman run line: the same network,
// address, volumes and cgroup for both; on a cgroup v1 host the nodeinit
// node gets the host's /sys/fs/cgroup and the systemd node podman's own
// with the host's hierarchies over it; only nodeinit's image gets
// nodeinit's flags.
func TestNodeRunArgs(t *testing.T) {
	for _, flavor := range []string{FlavorNodeinit, FlavorSystemd} {
		t.Run(flavor, func(t *testing.T) {
			cl := &Cluster{Config: Config{Name: "test", Nodes: 2, Subnet: DefaultSubnet, Dir: "/clusters/test", Flavor: flavor}}
			if err := cl.addresses(); err != nil {
				t.Fatal(err)
			}
			args := cl.NodeRunArgs(1)
			line := " " + strings.Join(args, " ") + " "
			for _, want := range []string{" --name test-worker2 ", " --hostname test-worker2 ", " --network test ", " --ip 172.30.40.12 ",
				" --privileged ", " --stop-timeout 60 ", " -v test-worker2-var:/var ", " -v /clusters/test/nodes/test-worker2:/etc/kubernetes:ro "} {
				if !strings.Contains(line, want) {
					t.Errorf("the run line lacks %q:\n%s", want, line)
				}
			}
			hostCgroup := slices.Contains(args, "/sys/fs/cgroup:/sys/fs/cgroup")
			if cgroupV1() {
				if !slices.Contains(args, "--cgroupns=host") || !slices.Contains(args, "--cgroup-parent=/nodeinit-cluster-test/test-worker2") {
					t.Errorf("on a cgroup v1 host a node runs in the host's cgroup namespace below its own cgroup:\n%s", line)
				}
				if hostCgroup != (flavor == FlavorNodeinit) {
					t.Errorf("the host's /sys/fs/cgroup is mounted: %v; want it for nodeinit's node alone:\n%s", hostCgroup, line)
				}
			} else if !slices.Contains(args, "--cgroupns=private") || hostCgroup {
				t.Errorf("on a cgroup v2 host a node has a private cgroup namespace and no cgroup mount:\n%s", line)
			}
			if flavor == FlavorNodeinit {
				if i := slices.Index(args, NodeImage); i < 0 || !slices.Contains(args[i:], "--raise-inotify-limits") {
					t.Errorf("nodeinit's node runs %s with --raise-inotify-limits:\n%s", NodeImage, line)
				}
				return
			}
			if args[len(args)-1] != SystemdNodeImage || !strings.Contains(line, " -e container=podman ") {
				t.Errorf("systemd's node runs %s, last, with container=podman:\n%s", SystemdNodeImage, line)
			}
			if cgroupV1() {
				for _, h := range hostCgroupHierarchies() {
					if !slices.Contains(args, h+":"+h) {
						t.Errorf("the host's hierarchy %s is not mounted into systemd's node:\n%s", h, line)
					}
				}
			}
		})
	}
}

// TestSystemdNodeCommandLines reads the systemd node's units as systemd
// does (the unit, then its drop-ins in order, ExecStart= emptied and set
// again, $VAR split at white space) and checks that containerd, the
// kubelet and kube-proxy get the command lines the nodeinit node's
// nodeinit gives them: the flavors differ in their supervisor alone.
func TestSystemdNodeCommandLines(t *testing.T) {
	root := testenv.ModuleRoot(t)
	cl := &Cluster{Config: Config{Name: "test", Nodes: 1, Subnet: DefaultSubnet}}
	if err := cl.addresses(); err != nil {
		t.Fatal(err)
	}
	args := cl.NodeRunArgs(0)
	flags := args[slices.Index(args, NodeImage)+1:]
	conf := filepath.Join(root, "images", "node-runtime", "config.yaml")
	out, err := exec.Command(testenv.Build(t, "./cmd/nodeinit"), append([]string{"--config=" + conf, "--write-flags"}, flags...)...).Output()
	if err != nil {
		t.Fatalf("nodeinit --write-flags %v: %v", flags, err)
	}
	nodeinit := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(nodeinit) != 3 {
		t.Fatalf("nodeinit --write-flags: want the kubelet's, kube-proxy's and containerd's lines:\n%s", out)
	}
	env := filepath.Join(t.TempDir(), "kube-proxy.env")
	if err := os.WriteFile(env, []byte(kubeProxyEnv()), 0o644); err != nil {
		t.Fatal(err)
	}
	units := map[string][]string{
		"kubelet":    {"systemd-node/kubelet.service", "systemd-node/10-kubeadm.conf", "systemd-node-runtime/kubelet-node.conf"},
		"kube-proxy": {"systemd-node/kube-proxy.service", "systemd-node-runtime/kube-proxy-node.conf"},
		"containerd": {"systemd-node-runtime/containerd.service"},
	}
	files := map[string]string{"/etc/kubernetes/kube-proxy.env": env}
	for i, name := range []string{"kubelet", "kube-proxy", "containerd"} {
		var paths []string
		for _, u := range units[name] {
			paths = append(paths, filepath.Join(root, "images", u))
		}
		got := unitCommand(t, files, paths...)
		want := strings.Fields(nodeinit[i])
		if name == "containerd" {
			// containerd's default configuration is the file nodeinit names.
			want = slices.DeleteFunc(want, func(w string) bool { return w == "--config" || w == "/etc/containerd/config.toml" })
		}
		slices.Sort(got[1:])
		slices.Sort(want[1:])
		if !slices.Equal(got, want) {
			t.Errorf("systemd's node runs %s as\n  %s\nnodeinit's as\n  %s", name, strings.Join(got, " "), strings.Join(want, " "))
		}
	}
}

// unitCommand is the command line systemd runs for a service whose unit
// file and drop-ins are paths, in order: the last ExecStart= after its
// last emptying, with Environment= and the EnvironmentFile= files (by
// their path in the node, found in files) expanded, $VAR split at white
// space as systemd splits it.
func unitCommand(t *testing.T, files map[string]string, paths ...string) []string {
	t.Helper()
	env := map[string]string{}
	var exec string
	assign := func(kv string) {
		if k, v, ok := strings.Cut(strings.Trim(kv, `"`), "="); ok {
			env[k] = strings.Trim(v, `"`)
		}
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		section := ""
		for l := range strings.SplitSeq(string(b), "\n") {
			l = strings.TrimSpace(l)
			if strings.HasPrefix(l, "[") {
				section = l
			}
			k, v, ok := strings.Cut(l, "=")
			if !ok || section != "[Service]" {
				continue
			}
			switch k {
			case "Environment":
				assign(v)
			case "EnvironmentFile":
				f, ok := files[strings.TrimPrefix(v, "-")]
				if !ok {
					continue // a file the node does not have: optional (-) in the units
				}
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				for kv := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
					assign(kv)
				}
			case "ExecStart":
				exec = v
			}
		}
	}
	var words []string
	for _, w := range strings.Fields(exec) {
		if strings.HasPrefix(w, "$") {
			words = append(words, strings.Fields(env[strings.TrimPrefix(w, "$")])...)
		} else {
			words = append(words, w)
		}
	}
	if len(words) == 0 {
		t.Fatalf("no ExecStart in %v", paths)
	}
	return words
}
