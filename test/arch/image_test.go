//go:build image

package arch_test

import (
	"archive/tar"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// make image-index writes one OCI image index of an amd64 and an arm64
// image; the arm64 one, pulled from it, runs under the emulator in podman
// as the image's ENTRYPOINT, and its nodeinit as make demo runs it: PID 1
// of a new pid and mount namespace with the demo executor and proxy (built
// for arm64 too), stopped by INT. It exits 0 after the executor drained and
// the proxy stopped, and reaped the heartbeats' orphans.
func TestTheImageIndexsArm64NodeinitRunsTheDemo(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "podman")
	testenv.RequireTool(t, "runc")
	enabled, _ := os.ReadFile("/proc/sys/fs/binfmt_misc/qemu-aarch64")
	testenv.Require(t, strings.HasPrefix(string(enabled), "enabled\n"), "qemu-aarch64 registered in binfmt_misc (make binfmt)")
	env, err := testenv.PodmanStore(t.TempDir(), "vfs")
	if err != nil {
		t.Fatal(err)
	}
	podman := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("podman", args...)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("podman %s: %v\n%s%s", strings.Join(args, " "), err, out, stderrOf(err))
		}
		return string(out)
	}

	dir := t.TempDir()
	archive := filepath.Join(dir, "index.tar")
	start := time.Now()
	mk := exec.Command("make", "--no-print-directory", "image-index", "IMAGE_INDEX_ARCHIVE="+archive,
		"IMAGE_INDEX=localhost/nodeinit-index:test", "VERSION=test")
	mk.Dir = testenv.ModuleRoot(t)
	mk.Env = env
	out, err := mk.CombinedOutput()
	if err != nil {
		t.Fatalf("make image-index: %v\n%s", err, out)
	}
	t.Logf("make image-index: %v\n%s", time.Since(start).Round(100*time.Millisecond), out)

	mediaType, platforms := readIndex(t, archive)
	if mediaType != "application/vnd.oci.image.index.v1+json" || !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Fatalf("%s holds a %s of %v, want an OCI image index of linux/amd64 and linux/arm64", archive, mediaType, platforms)
	}
	if left := podman("images", "--all", "--quiet"); left != "" {
		t.Errorf("make image-index left images in podman's store:\n%s", left)
	}

	// The arm64 image, from the index, run by podman with its ENTRYPOINT.
	image := strings.TrimSpace(podman("pull", "--quiet", "--arch", "arm64", "oci-archive:"+archive))
	if got := podman("image", "inspect", "--format", "{{.Os}}/{{.Architecture}}", image); got != "linux/arm64\n" {
		t.Fatalf("podman pull --arch arm64 from the index gave a %s image", got)
	}
	if got := podman("run", "--rm", "--network=none", image, "--version"); got != "nodeinit test linux/arm64\n" {
		t.Fatalf("the arm64 image's nodeinit --version printed %q", got)
	}

	// Its nodeinit, out of the image, as make demo runs it.
	podman("create", "--name", "nodeinit-index-test", image)
	podman("cp", "nodeinit-index-test:/nodeinit", filepath.Join(dir, "nodeinit"))
	podman("rm", "nodeinit-index-test")
	build := exec.Command("go", "build", "-o", dir+"/", "./test/helpers/demo-executor", "./test/helpers/demo-proxy")
	build.Dir = testenv.ModuleRoot(t)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOARCH=arm64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("GOARCH=arm64 go build the demo programs: %v\n%s", err, out)
	}
	for _, f := range []string{"nodeinit", "demo-executor", "demo-proxy"} {
		e, err := elf.Open(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if e.Machine != elf.EM_AARCH64 {
			t.Fatalf("%s is an %v binary, want arm64", f, e.Machine)
		}
		e.Close()
	}
	n := testenv.Launch(t, testenv.Options{MountNS: true, Binary: filepath.Join(dir, "nodeinit")},
		"--proxy-path="+filepath.Join(dir, "demo-proxy"), "--proxy-arg=--interval=200ms", "--shutdown-grace-period=5s",
		"--", filepath.Join(dir, "demo-executor"), "--interval=200ms", "--drain=200ms")
	testenv.WaitFor(t, 60*time.Second, "heartbeats and rule syncs", func() bool {
		l := n.Log()
		return strings.Contains(l, "heartbeat 3") && strings.Contains(l, "synced service rules") || !n.Running()
	})
	n.Signal(syscall.SIGINT)
	if got := n.Wait(30 * time.Second); got != 0 {
		t.Fatalf("exit %d; log:\n%s", got, n.Log())
	}
	for _, want := range []string{`"Starting nodeinit" version="test" pid=1`, "got interrupt: draining pods", "[demo-proxy] got terminated: exiting 0"} {
		if !strings.Contains(n.Log(), want) {
			t.Errorf("the log lacks %q:\n%s", want, n.Log())
		}
	}
	reaped := -1
	if m := regexp.MustCompile(`"All processes have ended".*\borphansReaped=(\d+)\b`).FindStringSubmatch(n.Log()); m != nil {
		reaped, _ = strconv.Atoi(m[1])
	}
	if reaped < 3 {
		t.Errorf("the last line counts %d orphans reaped, want at least the three heartbeats':\n%s", reaped, testenv.Tail(n.Log(), 3))
	}
}

// readIndex reads the image index of an oci-archive: index.json names it,
// and it names each image with its platform.
func readIndex(t *testing.T, archive string) (mediaType string, platforms []string) {
	t.Helper()
	files := map[string][]byte{}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		if b, err := io.ReadAll(tr); err == nil && h.Size < 1<<20 {
			files[path.Clean(h.Name)] = b
		}
	}
	type descriptor struct {
		MediaType string
		Digest    string
		Platform  struct{ OS, Architecture string }
	}
	var top, index struct {
		MediaType string
		Manifests []descriptor
	}
	if err := json.Unmarshal(files["index.json"], &top); err != nil || len(top.Manifests) != 1 {
		t.Fatalf("%s: index.json %s (%v): want one image index", archive, files["index.json"], err)
	}
	blob := "blobs/" + strings.Replace(top.Manifests[0].Digest, ":", "/", 1)
	if err := json.Unmarshal(files[blob], &index); err != nil {
		t.Fatalf("%s: %s: %v", archive, blob, err)
	}
	for _, m := range index.Manifests {
		platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
	}
	slices.Sort(platforms)
	return index.MediaType, platforms
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
