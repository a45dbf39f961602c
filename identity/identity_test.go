package identity

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const (
	imageID = "0123456789abcdef0123456789abcdef"
	hostsID = "3d1219c7c4c5404aaa1f6d2a48adfda4"
	keptID  = "fedcba9876543210fedcba9876543210"
)

// fakeRoot makes a root with files (path: content; a content of "/" makes
// a directory) and returns it.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if content == "/" {
			must(t, os.MkdirAll(p, 0o755))
			continue
		}
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return root
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestDecideGivesTheNodeAMachineIDOfItsOwn(t *testing.T) {
	const state = "/var/lib/kubelet/nodeinit"
	for _, tc := range []struct {
		name   string
		files  map[string]string
		pid1   bool
		image  string
		source Source
		id     string // "" for a new one
		mount  string
		reason string
	}{
		{"a valid id is the container's own", map[string]string{"etc/machine-id": hostsID + "\n"}, true, "", Own, hostsID, "", "is the container's own"},
		{"a valid id is kept when it is not the image's", map[string]string{"etc/machine-id": hostsID + "\n"}, true, imageID, Own, hostsID, "", "is the container's own"},
		{"missing", map[string]string{"etc": "/"}, true, "", Generated, "", state + "/machine-id", "is missing"},
		{"empty", map[string]string{"etc/machine-id": ""}, true, "", Generated, "", state + "/machine-id", "is empty"},
		{"uninitialized, as systemd's images ship it", map[string]string{"etc/machine-id": "uninitialized\n"}, true, "", Generated, "", state + "/machine-id", "is uninitialized"},
		{"not a machine-id", map[string]string{"etc/machine-id": "0123456789ABCDEF0123456789ABCDEF\n"}, true, "", Generated, "", state + "/machine-id", "is not a machine-id"},
		{"all zeros", map[string]string{"etc/machine-id": strings.Repeat("0", 32)}, true, "", Generated, "", state + "/machine-id", "is not a machine-id"},
		{"the image's baked id", map[string]string{"etc/machine-id": imageID + "\n"}, true, imageID, Generated, "", state + "/machine-id", "baked into the image"},
		{"kept by an earlier start", map[string]string{"etc/machine-id": imageID, state[1:] + "/machine-id": keptID + "\n"}, true, imageID, Kept, keptID, state + "/machine-id", "baked into the image"},
		{"the host's, sharing the host's pid namespace", map[string]string{"etc/machine-id": "uninitialized", "proc/1/root/etc/machine-id": hostsID + "\n"},
			false, "", Host, hostsID, state + "/host-machine-id", "shares the host's pid namespace"},
		{"PID 1 is nodeinit: not the host's", map[string]string{"etc/machine-id": "uninitialized", "proc/1/root/etc/machine-id": hostsID},
			true, "", Generated, "", state + "/machine-id", "is uninitialized"},
		{"PID 1's id is invalid: a container's init", map[string]string{"etc/machine-id": "uninitialized", "proc/1/root/etc/machine-id": "uninitialized"},
			false, "", Generated, "", state + "/machine-id", "is uninitialized"},
		{"PID 1's id is the image's: a container's init", map[string]string{"etc/machine-id": imageID, "proc/1/root/etc/machine-id": imageID},
			false, imageID, Generated, "", state + "/machine-id", "baked into the image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeRoot(t, tc.files)
			p, err := Decide(Options{Root: root, StateDir: state, ImageMachineID: tc.image, PID1: tc.pid1, MachineID: true})
			must(t, err)
			if p.Source != tc.source || p.MachineIDSource != tc.mount || !strings.Contains(p.Reason, tc.reason) {
				t.Errorf("source %q, machine-id source %q, reason %q; want %q, %q, one saying %q", p.Source, p.MachineIDSource, p.Reason, tc.source, tc.mount, tc.reason)
			}
			if tc.id != "" && p.MachineID != tc.id {
				t.Errorf("machine-id %q, want %q", p.MachineID, tc.id)
			}
			if !Valid(p.MachineID) {
				t.Errorf("machine-id %q is not valid", p.MachineID)
			}
			if tc.id == "" && (p.MachineID == imageID || p.MachineID == hostsID) {
				t.Errorf("a new machine-id is %q", p.MachineID)
			}
			if len(p.Adjustments()) != 1 || !strings.Contains(p.Adjustments()[0].String(), p.MachineID) {
				t.Errorf("the log lines %v do not say the machine-id %s", p.Adjustments(), p.MachineID)
			}
			// Decide changes nothing: Apply does.
			if _, err := os.Stat(filepath.Join(root, state, "machine-id")); tc.source == Generated && err == nil {
				t.Errorf("Decide kept the new id already")
			}
		})
	}
}

func TestDecideWithoutAPlaceToKeepTheIDFails(t *testing.T) {
	root := fakeRoot(t, map[string]string{"etc/machine-id": "uninitialized"})
	_, err := Decide(Options{Root: root, PID1: true, MachineID: true})
	if err == nil || !strings.Contains(err.Error(), "no directory to keep the node's machine-id in") {
		t.Errorf("error %v", err)
	}
}

func TestDecideRefusesAKeptIDThatIsNotOne(t *testing.T) {
	root := fakeRoot(t, map[string]string{"etc/machine-id": "uninitialized", "state/machine-id": "garbage"})
	_, err := Decide(Options{Root: root, StateDir: "/state", PID1: true, MachineID: true})
	if err == nil || !strings.Contains(err.Error(), "remove it to have a new one made") {
		t.Errorf("error %v", err)
	}
}

func TestMachineIDOffLeavesItAlone(t *testing.T) {
	root := fakeRoot(t, map[string]string{"etc/machine-id": "uninitialized"})
	p, err := Decide(Options{Root: root, StateDir: "/state", PID1: true})
	must(t, err)
	if p.MachineIDSource != "" || p.Source != "" || len(p.Adjustments()) != 0 {
		t.Errorf("with the machine-id off: %+v", p)
	}
}

func TestNewIDsAreSystemdsFormatAndDiffer(t *testing.T) {
	format := regexp.MustCompile(`^[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}$`)
	seen := map[string]bool{}
	for range 100 {
		id, err := newID()
		must(t, err)
		if !format.MatchString(id) || !Valid(id) || seen[id] {
			t.Fatalf("new id %q: format %v, seen before %v", id, format.MatchString(id), seen[id])
		}
		seen[id] = true
	}
}

func TestProductUUIDIsOptInAndKept(t *testing.T) {
	root := fakeRoot(t, map[string]string{"etc/machine-id": hostsID})
	p, err := Decide(Options{Root: root, StateDir: "/state", PID1: true, MachineID: true})
	must(t, err)
	if p.ProductUUIDSource != "" {
		t.Errorf("a product_uuid without asking: %+v", p)
	}
	p, err = Decide(Options{Root: root, StateDir: "/state", PID1: true, ProductUUID: true})
	must(t, err)
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	if !uuid.MatchString(p.ProductUUID) || !p.ProductUUIDNew || p.ProductUUIDSource != "/state/product_uuid" {
		t.Errorf("product_uuid %+v", p)
	}
	must(t, os.MkdirAll(filepath.Join(root, "state"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "state/product_uuid"), []byte("8c4b6f1e-0d3a-4c55-9a2b-7e1f00c0ffee\n"), 0o444))
	p, err = Decide(Options{Root: root, StateDir: "/state", PID1: true, ProductUUID: true})
	must(t, err)
	if p.ProductUUID != "8c4b6f1e-0d3a-4c55-9a2b-7e1f00c0ffee" || p.ProductUUIDNew {
		t.Errorf("kept product_uuid: %+v", p)
	}
}
