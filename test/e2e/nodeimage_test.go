package e2e

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// TestNodeImageBuildsAndShowsItsCommandLines builds images/node from scratch
// (the demo programs stand in for the kubelet and kube-proxy) and runs it
// with --write-flags: the default configuration is found, valid, and names
// the binaries the image holds.
func TestNodeImageBuildsAndShowsItsCommandLines(t *testing.T) {
	e := start(t)
	root := testenv.ModuleRoot(t)
	context := t.TempDir()
	for from, to := range map[string]string{
		testenv.Build(t, "./cmd/nodeinit"):               "bin/nodeinit",
		testenv.Build(t, "./test/helpers/demo-executor"): "bin/kubelet",
		testenv.Build(t, "./test/helpers/demo-proxy"):    "bin/kube-proxy",
		filepath.Join(root, "images/node/config.yaml"):   "images/node/config.yaml",
		filepath.Join(root, "images/node/machine-id"):    "images/node/machine-id",
	} {
		if err := copyFile(from, filepath.Join(context, to)); err != nil {
			t.Fatal(err)
		}
	}
	image := "localhost/nodeinit-node-e2e:" + randomID()
	e.must(t, "build", "-q", "-f", filepath.Join(root, "images/node/Dockerfile"), "--build-arg", "BASE=scratch", "-t", image, context)
	t.Cleanup(func() { _, _ = e.podman("rmi", "--force", image) })

	if got := e.inspect(t, image, "{{.Config.StopSignal}}"); got != "SIGTERM" {
		t.Errorf("stop signal %q, want SIGTERM", got)
	}
	if got := e.inspect(t, image, "{{json .Config.Entrypoint}}"); got != `["/nodeinit","--config=/etc/nodeinit/config.yaml"]` {
		t.Errorf("entrypoint %s, want nodeinit with the default config", got)
	}
	// The image ships /etc/machine-id uninitialized, and --write-flags
	// says on stderr that the node gets one of its own.
	cmd := e.command("run", "--rm", "--network=none", image, "--write-flags")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("--write-flags: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	if want := `Mounting a machine-id of the node's own over /etc/machine-id (--node-machine-id=false turns this off) machineID="generated at start" source="generated" from="/var/lib/kubelet/nodeinit/machine-id" reason="/etc/machine-id is uninitialized"`; !strings.Contains(stderr.String(), want) {
		t.Errorf("--write-flags said on stderr:\n%s\nwant a line with\n%s", stderr.String(), want)
	}
	kubelet := strings.Index(out, "/usr/local/bin/kubelet")
	proxy := strings.Index(out, "/usr/local/bin/kube-proxy")
	if kubelet < 0 || proxy < 0 || kubelet > proxy {
		t.Errorf("--write-flags printed:\n%s\nwant the kubelet's command line, then kube-proxy's", out)
	}
}
