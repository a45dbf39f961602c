package integration

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

func envValue(env []string, key string) (string, bool) {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v, true
		}
	}
	return "", false
}

func TestWriteFlagsPrintsCommandLinesAndStartsNothing(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "started")
	i := start(t, asSubreaper, "--write-flags", "--proxy-mode=ipvs", "--proxy-logv=3", "--hostname-override=Node-A",
		"--proxy-arg=--metrics-bind-address=0.0.0.0:10249", "--proxy-arg=two words",
		"--", "/bin/touch", marker, "--node-ip=10.1.2.3")
	if got := i.Wait(10 * time.Second); got != 0 {
		t.Fatalf("exit %d; stderr %s", got, i.Stderr())
	}
	want := "/bin/touch " + marker + " --node-ip=10.1.2.3\n" +
		"kube-proxy --bind-address=10.1.2.3 --v=3 --proxy-mode=ipvs --hostname-override=node-a --metrics-bind-address=0.0.0.0:10249 'two words'\n"
	if i.Log() != want {
		t.Errorf("--write-flags printed:\n%s\nwant:\n%s", i.Log(), want)
	}
	if exists(marker) {
		t.Error("--write-flags started the executor")
	}
}

// The proxy gets the flags nodeinit assembles, then --proxy-arg in order;
// the executor gets PATH with $PWD/bin, and no NOTIFY_SOCKET.
func TestChildrenGetAssembledArgumentsAndEnvironment(t *testing.T) {
	_, task := binaries(t)
	dir := t.TempDir()
	ex, px := filepath.Join(dir, "executor.json"), filepath.Join(dir, "proxy.json")
	t.Setenv("NOTIFY_SOCKET", filepath.Join(dir, "no-such-socket"))
	i := start(t, asSubreaper, "--proxy-path="+task, "--proxy-bindall", "--proxy-mode=nftables", "--conntrack-min=131072",
		"--proxy-kubeconfig=/etc/kubernetes/proxy.conf", "--master=https://api:6443",
		"--proxy-arg=--report="+px, "--proxy-arg=--b", "--path-override=/opt/node/bin:/usr/bin",
		"--", task, "--report="+ex)
	testenv.WaitFor(t, 10*time.Second, "reports", func() bool { return exists(ex) && exists(px) })
	if code := i.Stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after TERM, want the executor's 0", code)
	}

	pr := testenv.ReadReport(t, px)
	wantArgs := []string{"--bind-address=0.0.0.0", "--v=0", "--proxy-mode=nftables", "--conntrack-min=131072",
		"--kubeconfig=/etc/kubernetes/proxy.conf", "--master=https://api:6443", "--report=" + px, "--b"}
	if strings.Join(pr.Args, " ") != strings.Join(wantArgs, " ") {
		t.Errorf("proxy args = %q\nwant %q", pr.Args, wantArgs)
	}
	er := testenv.ReadReport(t, ex)
	wd, _ := os.Getwd()
	if path, _ := envValue(er.Env, "PATH"); path != "/opt/node/bin:/usr/bin:"+filepath.Join(wd, "bin") {
		t.Errorf("executor PATH = %q", path)
	}
	if _, ok := envValue(er.Env, "NOTIFY_SOCKET"); ok {
		t.Error("NOTIFY_SOCKET reached the executor")
	}
}

func TestBadInputsGetAMessageAndTheirExitCode(t *testing.T) {
	dir := t.TempDir()
	badFile := filepath.Join(dir, "bad.yaml")
	must(t, os.WriteFile(badFile, []byte("kind: NodeInitConfig\napiVersion: nodeinit/v1alpha1\nproxy:\n  mode: userspace\n  bindAdress: 1.2.3.4\nshutdownGracePeriod: -5s\n"), 0o644))
	unreadable := filepath.Join(dir, "unreadable.yaml")
	must(t, os.Mkdir(unreadable, 0o755)) // a directory cannot be read as a file
	notADir := filepath.Join(dir, "file")
	must(t, os.WriteFile(notADir, nil, 0o644))
	openLogs := filepath.Join(dir, "open-logs")
	must(t, os.Mkdir(openLogs, 0o755))
	must(t, os.Chmod(openLogs, 0o1777)) // like /tmp
	trapped := filepath.Join(dir, "trapped-logs")
	must(t, os.Mkdir(trapped, 0o755))
	victim := filepath.Join(dir, "victim")
	must(t, os.WriteFile(victim, []byte("untouched\n"), 0o644))
	must(t, os.Symlink(victim, filepath.Join(trapped, "executor.log")))
	_, task := binaries(t)
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr []string // lines expected on stderr, in order
		stdout string   // or a message in the log
	}{
		{"unknown proxy mode", []string{"--proxy-mode=userspace", task}, 2,
			[]string{`nodeinit: invalid argument "userspace" for "--proxy-mode" flag: supported values: "iptables", "ipvs", "nftables"`}, ""},
		{"negative duration", []string{"--shutdown-grace-period=-1s", task}, 2, []string{"--shutdown-grace-period"}, ""},
		{"private and rshared", []string{"--private-mountns", "--make-rshared", task}, 2, []string{"--make-rshared"}, ""},
		{"config file with bad fields", []string{"--config", badFile, task}, 255, []string{
			"Invalid NodeInitConfig " + badFile,
			"  proxy.bindAdress: Unknown field",
			`  proxy.mode: Unsupported value: "userspace": supported values: "iptables", "ipvs", "nftables"`,
			`  shutdownGracePeriod: Invalid value: "-5s": must be non-negative`,
		}, ""},
		{"missing config file", []string{"--config", filepath.Join(dir, "missing.yaml"), task}, 255,
			[]string{filepath.Join(dir, "missing.yaml") + ": no such file or directory"}, ""},
		{"unreadable config file", []string{"--config", unreadable, task}, 255, []string{unreadable}, ""},
		{"log dir that cannot be created", []string{"--run-proxy=false", "--log-dir", filepath.Join(notADir, "logs"), task}, 1,
			nil, filepath.Join(notADir, "logs")},
		{"log dir others may write to", []string{"--run-proxy=false", "--log-dir", openLogs, task}, 1, nil, "unsafe log dir " + openLogs},
		{"a symlink planted as a log file", []string{"--run-proxy=false", "--log-dir", trapped, task}, 1, nil, filepath.Join(trapped, "executor.log")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := start(t, asSubreaper, tc.args...)
			if got := i.Wait(10 * time.Second); got != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s\nstdout:\n%s", got, tc.code, i.Stderr(), i.Log())
			}
			lines := strings.Split(strings.TrimRight(i.Stderr(), "\n"), "\n")
			for k, want := range tc.stderr {
				if k >= len(lines) || !strings.Contains(lines[k], want) {
					t.Errorf("stderr line %d does not hold %q:\n%s", k+1, want, i.Stderr())
				}
			}
			if tc.stdout != "" && !strings.Contains(i.Log(), tc.stdout) {
				t.Errorf("log does not name %q:\n%s", tc.stdout, i.Log())
			}
			if strings.Contains(i.Log(), "Started task") {
				t.Errorf("a task was started despite the bad input")
			}
			if errs := i.Lines('E'); tc.code == 1 && len(errs) != 1 {
				t.Errorf("want one error line, got %d:\n%s", len(errs), i.Log())
			}
		})
	}
	if b, _ := os.ReadFile(victim); string(b) != "untouched\n" {
		t.Errorf("the file a planted symlink pointed at was written: %q", b)
	}
}

// With --log-dir the executor's output goes to a rotated file: every line
// arrives exactly once, across the rotations.
func TestLogDirRotatesWithoutLosingOrDuplicatingLines(t *testing.T) {
	_, task := binaries(t)
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	const lines = 60000 // about 4 MiB: several rotations at 1 MiB
	// Each task writes its lines, then says it is ready; TERM comes only
	// then, so that a proxy not yet started, or not yet able to catch the
	// TERM of the shutdown, cannot leave proxy.log short.
	ex, px := filepath.Join(dir, "executor.ready"), filepath.Join(dir, "proxy.ready")
	i := start(t, asSubreaper, "--log-dir="+logs, "--max-log-size=1Mi", "--max-log-backups=10",
		"--proxy-path="+task, "--proxy-arg=--lines=10", "--proxy-arg=--ready="+px,
		"--", task, fmt.Sprintf("--lines=%d", lines), "--ready="+ex, "--exit=3")
	testenv.WaitFor(t, 60*time.Second, "tasks ready", func() bool { return exists(ex) && exists(px) })
	i.Signal(syscall.SIGTERM)
	if got := i.Wait(60 * time.Second); got != 3 {
		t.Fatalf("exit %d; log:\n%s", got, i.Log())
	}
	files, _ := filepath.Glob(filepath.Join(logs, "executor*.log"))
	if len(files) < 4 {
		t.Fatalf("%d executor log files, want at least 4 after ~4 MiB at 1 MiB each: %v", len(files), files)
	}
	seen := make(map[string]int)
	for _, f := range files {
		data, err := os.ReadFile(f)
		must(t, err)
		if len(data) > 1<<20 {
			t.Errorf("%s holds %d bytes, more than 1 MiB", f, len(data))
		}
		for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
			seen[l]++
		}
	}
	if len(seen) != lines {
		t.Errorf("%d distinct lines across %d files, want %d", len(seen), len(files), lines)
	}
	var dup []string
	for l, n := range seen {
		if n != 1 {
			dup = append(dup, l)
		}
	}
	sort.Strings(dup)
	if len(dup) > 0 {
		t.Errorf("%d lines not exactly once, e.g. %q", len(dup), dup[0])
	}
	proxyLog, err := os.ReadFile(filepath.Join(logs, "proxy.log"))
	must(t, err)
	if n := strings.Count(string(proxyLog), "\n"); n != 10 {
		t.Errorf("proxy.log holds %d lines, want 10", n)
	}
	if strings.Contains(i.Log(), "line 0000") {
		t.Error("children's output reached nodeinit's stdout despite --log-dir")
	}
}

// notifySocket listens on a unix datagram socket like systemd or podman and
// returns the messages received.
func notifySocket(t *testing.T) (path string, msgs <-chan string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	must(t, err)
	t.Cleanup(func() { conn.Close() })
	ch := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			ch <- string(buf[:n])
		}
	}()
	return path, ch
}

func expectMessage(t *testing.T, msgs <-chan string, want string, within time.Duration) {
	t.Helper()
	select {
	case m := <-msgs:
		if !strings.Contains(m, want) {
			t.Fatalf("notify message %q, want %s", m, want)
		}
	case <-time.After(within):
		t.Fatalf("no %s within %v", want, within)
	}
}

func TestReadyAndStoppingReachTheServiceManager(t *testing.T) {
	_, task := binaries(t)
	sock, msgs := notifySocket(t)
	t.Setenv("NOTIFY_SOCKET", sock)
	ready := filepath.Join(t.TempDir(), "ready")
	i := start(t, asSubreaper, "--run-proxy=false", "--", task, "--ready="+ready)
	expectMessage(t, msgs, "READY=1", 10*time.Second)
	testenv.WaitFor(t, 10*time.Second, "executor ready", func() bool { return exists(ready) })
	i.Signal(syscall.SIGTERM)
	expectMessage(t, msgs, "STOPPING=1", 10*time.Second)
	if got := i.Wait(10 * time.Second); got != 0 {
		t.Fatalf("exit %d", got)
	}
	select {
	case m := <-msgs:
		t.Errorf("unexpected message after STOPPING=1: %q", m)
	default:
	}
}

// With --ready-url, READY=1 waits until the URL answers 200.
func TestReadyWaitsForTheReadyURL(t *testing.T) {
	_, task := binaries(t)
	var healthy atomic.Bool
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		if !healthy.Load() {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	defer srv.Close()
	sock, msgs := notifySocket(t)
	t.Setenv("NOTIFY_SOCKET", sock)
	i := start(t, asSubreaper, "--run-proxy=false", "--ready-url="+srv.URL+"/healthz", "--", task)
	testenv.WaitFor(t, 10*time.Second, "the probe asking", func() bool { return asked.Load() >= 2 })
	select {
	case m := <-msgs:
		t.Fatalf("%q sent while the URL answers 503", m)
	default:
	}
	healthy.Store(true)
	expectMessage(t, msgs, "READY=1", 10*time.Second)
	i.Signal(syscall.SIGTERM)
	expectMessage(t, msgs, "STOPPING=1", 10*time.Second)
	if code := i.Wait(10 * time.Second); code != 0 {
		t.Errorf("exit %d after TERM, want the executor's 0", code)
	}
}
