package mountcg

import (
	"path/filepath"
	"testing"

	"github.com/nodeinit/nodeinit/cgroups"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// inPrivateCgroupNamespace is the shell that starts nodeinit as a container
// runtime with --cgroupns=private does: it moves itself into the
// container's cgroup ($1, a directory of the unified hierarchy), then
// unshares its cgroup namespace, rooted there, and mounts at /sys/fs/cgroup
// either the host's tree ($2 = host: a bind of the unified mount $4, moved
// through the empty directory $3, as -v /sys/fs/cgroup:/sys/fs/cgroup
// gives) or a cgroup2 mount of its own ($2 = own: the namespace's tree, as
// the runtime mounts it without -v); then it execs nodeinit, keeping PID 1.
// Its mount namespace is the test's private one, so nothing reaches the
// host.
const inPrivateCgroupNamespace = `cg=$1 mode=$2 tmp=$3 unified=$4
shift 4
echo 0 > "$cg/cgroup.procs" || exit 99
exec unshare --cgroup -- /bin/sh -c '
case $1 in
host) mount --bind "$3" "$2" && umount -l /sys/fs/cgroup && mount --move "$2" /sys/fs/cgroup ;;
own) umount -l /sys/fs/cgroup && mount -t cgroup2 cgroup2 /sys/fs/cgroup ;;
esac || exit 99
shift 3
exec "$@"' sh "$mode" "$tmp" "$unified" "$@"`

// startInPrivateCgroupNamespace runs nodeinit, PID 1 of new pid and mount
// namespaces, in a private cgroup namespace rooted at a new cgroup of the
// unified hierarchy, with the host's cgroup2 tree or one of its own at
// /sys/fs/cgroup (mount: "host" or "own"). It returns the node and the
// host's unified hierarchy.
func startInPrivateCgroupNamespace(t *testing.T, mount string, flags ...string) (*node, cgroups.Hierarchy, string) {
	t.Helper()
	l := layout(t)
	h, ok := l.Unified()
	testenv.Require(t, ok, "the cgroup v2 unified hierarchy mounted")
	testenv.RequireTool(t, "unshare")
	container := "/" + randomID(t)
	dir := makeCgroups(t, cgroups.Layout{Hierarchies: []cgroups.Hierarchy{h}}, container)[h.Name()]
	script := []string{"/bin/sh", "-c", inPrivateCgroupNamespace, "sh", dir, mount, t.TempDir(), h.Mountpoint}
	return startNodeWith(t, nodeOptions{prefix: script}, nil, flags...), h, container
}

// The host's cgroup tree in a private cgroup namespace (podman's and
// Docker's default on cgroup v2, with -v /sys/fs/cgroup:/sys/fs/cgroup):
// the mount's root shows as /.. from the namespace, and nodeinit, which
// sees itself in "/", would take the host's root cgroup for its
// container's. It touches nothing there: one error line says to run with
// --cgroupns=host or not to mount the host's /sys/fs/cgroup, and it exits
// 1 before it starts anything, also without --require-cgroup. With a
// cgroup2 mount of its own in the same namespace, nodeinit evacuates the
// namespace's root into /init and runs the node.
func TestHostCgroupTreeInAPrivateCgroupNamespace(t *testing.T) {
	t.Run("host's tree: refused", func(t *testing.T) {
		l := layout(t)
		h, ok := l.Unified()
		testenv.Require(t, ok, "the cgroup v2 unified hierarchy mounted")
		hostRoot, ok := h.Dir("/", "/")
		if !ok {
			t.Fatalf("the test's own unified mount %s does not show the root cgroup", h.Mountpoint)
		}
		hostInit := filepath.Join(hostRoot, "init")
		if !exists(hostInit) {
			// Registered first, so it runs after nodeinit is gone.
			t.Cleanup(func() {
				if exists(hostInit) {
					t.Errorf("nodeinit made %s in the host's root cgroup", hostInit)
					removeCgroup(t, hostInit, false)
				}
			})
		}
		n, _, _ := startInPrivateCgroupNamespace(t, "host")
		n.expectFatal("Cannot join", "the cgroup mount at /sys/fs/cgroup (cgroup /..) shows cgroups above or beside the root of nodeinit's private cgroup namespace",
			"run the container with --cgroupns=host, or do not mount the host's /sys/fs/cgroup into it")
		if w := n.cgroupWarnings(); len(w) > 0 {
			t.Errorf("warnings before the refusal: %q", w)
		}
	})
	t.Run("own tree: evacuated", func(t *testing.T) {
		n, h, container := startInPrivateCgroupNamespace(t, "own")
		executor, proxy := n.waitReady()
		for who, text := range map[string]string{"executor": executor.Cgroup, "proxy": proxy.Cgroup} {
			if got := inHierarchy(text, h); got != "/init" {
				t.Errorf("%s in %q of the namespace, want /init", who, got)
			}
		}
		if got := inHierarchy(readProc(t, n.Pid(), "cgroup"), h); got != container+"/init" {
			t.Errorf("nodeinit seen from the host in %q, want %s/init", got, container)
		}
		if i := n.Lines('I', "moved 1 processes of the root cgroup into /init"); len(i) != 1 {
			t.Errorf("want one line saying nodeinit moved itself into /init; log:\n%s", n.Log())
		}
		if w := n.cgroupWarnings(); len(w) > 0 {
			t.Errorf("warnings: %q", w)
		}
		if code := n.stop(); code != 0 {
			t.Errorf("nodeinit exited %d after TERM, want 0", code)
		}
	})
}
