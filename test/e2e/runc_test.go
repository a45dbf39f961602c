package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// TestRuncRunsImageRootfs runs nodeinit with runc directly, on an OCI bundle
// made from the e2e image's root filesystem, so the behaviour does not hang
// on one engine: PID 1, klog on stdout, TERM to the executor first and the
// proxy last, and runc's status is the executor's.
func TestRuncRunsImageRootfs(t *testing.T) {
	e := start(t)
	runc := func(args ...string) *exec.Cmd {
		state := filepath.Join(e.dir, "runc")
		return exec.Command("runc", append([]string{"--root", state}, args...)...)
	}
	bundle := t.TempDir()
	rootfs := filepath.Join(bundle, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	exportRootfs(t, e, rootfs)

	// runc's own default spec, with our command, no terminal and /rec.
	spec := runc("spec", "--bundle", bundle)
	if out, err := spec.CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v\n%s", err, out)
	}
	rec := t.TempDir()
	editSpec(t, filepath.Join(bundle, "config.json"), func(c map[string]any) {
		process := c["process"].(map[string]any)
		process["terminal"] = false
		process["args"] = append([]any{"/nodeinit"}, anySlice(taskNode(nil, "--exit=5"))...)
		process["env"] = []any{"PATH=/usr/local/bin"}
		c["mounts"] = append(c["mounts"].([]any), map[string]any{
			"destination": recDir, "type": "bind", "source": rec, "options": []any{"rbind", "rw"},
		})
	})

	id := "nodeinit-e2e-" + randomID()
	var stdout, stderr bytes.Buffer
	run := runc("run", "--bundle", bundle, id)
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = runc("delete", "--force", id).Run()
		if run.ProcessState == nil {
			_ = run.Process.Kill()
			_ = run.Wait()
		}
		if t.Failed() {
			t.Logf("container output:\n%s%s", stdout.Bytes(), stderr.Bytes())
		}
	})
	c := &container{rec: rec}
	waitFor(t, rec, 30*time.Second, "the executor and the proxy to be ready", -1, func() bool {
		_, errE := os.Stat(c.path("executor.ready"))
		_, errP := os.Stat(c.path("proxy.ready"))
		return errE == nil && errP == nil
	})
	for _, task := range []string{"executor", "proxy"} {
		if r := testenv.ReadReport(t, c.path(task+".json")); r.Ppid != 1 {
			t.Errorf("%s's parent is pid %d, want nodeinit as pid 1", task, r.Ppid)
		}
	}

	if out, err := runc("kill", id, "TERM").CombinedOutput(); err != nil {
		t.Fatalf("runc kill %s TERM: %v\n%s", id, err, out)
	}
	err := run.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 5 {
		t.Errorf("runc run ended with %v, want the executor's status 5", err)
	}
	execTerm := signalTimes(t, c.path("executor.rec"), "TERM")
	proxyTerm := signalTimes(t, c.path("proxy.rec"), "TERM")
	if len(execTerm) == 0 || len(proxyTerm) == 0 || execTerm[0] >= proxyTerm[0] {
		t.Errorf("TERM times: executor %v, proxy %v; want both, executor first", execTerm, proxyTerm)
	}
	if !klogLine.Match(stdout.Bytes()) {
		t.Errorf("no klog line from pid 1 on the container's stdout:\n%s", stdout.Bytes())
	}
}

// exportRootfs unpacks the e2e image's root filesystem into dir, by way of
// a created (never started) container, as any OCI tool would see it.
func exportRootfs(t *testing.T, e *engine, dir string) {
	t.Helper()
	id := strings.TrimSpace(e.must(t, "create", e.image))
	defer func() { _, _ = e.podman("rm", id) }()
	tarball := filepath.Join(t.TempDir(), "rootfs.tar")
	e.must(t, "export", "--output", tarball, id)
	if out, err := exec.Command("tar", "-C", dir, "-xf", tarball).CombinedOutput(); err != nil {
		t.Fatalf("unpack the image's root filesystem: %v\n%s", err, out)
	}
}

// editSpec rewrites an OCI runtime config.json through edit.
func editSpec(t *testing.T, path string, edit func(map[string]any)) {
	t.Helper()
	var c map[string]any
	if err := json.Unmarshal([]byte(readFile(t, path)), &c); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	edit(c)
	data, err := json.MarshalIndent(c, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func anySlice(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
