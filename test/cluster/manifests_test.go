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
