package logind

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// writeConf writes files under root, making their directories.
func writeConf(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLogindConfIsReadInSystemdsOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		links map[string]string
		want  time.Duration // 0: not set
		from  string
	}{
		{name: "nothing"},
		{name: "the main file", files: map[string]string{"etc/systemd/logind.conf": "[Login]\nInhibitDelayMaxSec=45\n"},
			want: 45 * time.Second, from: "etc/systemd/logind.conf"},
		{name: "only the first main file is read", files: map[string]string{
			"etc/systemd/logind.conf":     "[Login]\n#InhibitDelayMaxSec=5\n",
			"usr/lib/systemd/logind.conf": "[Login]\nInhibitDelayMaxSec=50\n"}},
		{name: "a drop-in over the main file", files: map[string]string{
			"etc/systemd/logind.conf":                      "[Login]\nInhibitDelayMaxSec=45\n",
			"usr/lib/systemd/logind.conf.d/10-vendor.conf": "[Login]\nInhibitDelayMaxSec=1min\n"},
			want: time.Minute, from: "usr/lib/systemd/logind.conf.d/10-vendor.conf"},
		{name: "drop-ins sorted by name across directories", files: map[string]string{
			"usr/lib/systemd/logind.conf.d/99-z.conf":       "[Login]\nInhibitDelayMaxSec=99\n",
			"etc/systemd/logind.conf.d/50-admin.conf":       "[Login]\nInhibitDelayMaxSec=50\n",
			"run/systemd/logind.conf.d/70-run.conf":         "[Login]\nInhibitDelayMaxSec=70\n",
			"usr/local/lib/systemd/logind.conf.d/60-x.conf": "[Login]\nInhibitDelayMaxSec=60\n"},
			want: 99 * time.Second, from: "usr/lib/systemd/logind.conf.d/99-z.conf"},
		{name: "a name in /etc hides the same name in /usr/lib", files: map[string]string{
			"etc/systemd/logind.conf.d/99-kubelet.conf":     kubeletDropIn("30"),
			"usr/lib/systemd/logind.conf.d/99-kubelet.conf": kubeletDropIn("300")},
			want: 30 * time.Second, from: "etc/systemd/logind.conf.d/99-kubelet.conf"},
		{name: "a drop-in masked by /dev/null in /etc", files: map[string]string{
			"etc/systemd/logind.conf":                   "[Login]\nInhibitDelayMaxSec=45\n",
			"usr/lib/systemd/logind.conf.d/10-x.conf":   "[Login]\nInhibitDelayMaxSec=600\n",
			"run/systemd/logind.conf.d/not-a-drop-in.x": "[Login]\nInhibitDelayMaxSec=700\n"},
			links: map[string]string{"etc/systemd/logind.conf.d/10-x.conf": os.DevNull},
			want:  45 * time.Second, from: "etc/systemd/logind.conf"},
		{name: "systemd.syntax", files: map[string]string{"etc/systemd/logind.conf.d/x.conf": "" +
			"# a comment\n; another\n[Other]\nInhibitDelayMaxSec=1\n" +
			"[Login]\n  InhibitDelayMaxSec  =  1min \\\n# inside a continuation\n 30s\n" +
			"KillUserProcesses=no\n"},
			want: 90 * time.Second, from: "etc/systemd/logind.conf.d/x.conf"},
		{name: "a value logind cannot parse is ignored", files: map[string]string{
			"etc/systemd/logind.conf.d/a.conf": "[Login]\nInhibitDelayMaxSec=20\n",
			"etc/systemd/logind.conf.d/b.conf": "[Login]\nInhibitDelayMaxSec=soon\n",
			"etc/systemd/logind.conf.d/c.conf": "[Login]\nInhibitDelayMaxSec=\n"},
			want: 20 * time.Second, from: "etc/systemd/logind.conf.d/a.conf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeConf(t, root, tc.files)
			for name, target := range tc.links {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
					t.Fatal(err)
				}
			}
			conf := readLogindConf(root)
			if tc.want == 0 {
				if conf.set {
					t.Errorf("InhibitDelayMaxSec = %v from %s, want none", conf.delay, conf.from)
				}
				return
			}
			if !conf.set || conf.delay != tc.want || conf.from != tc.from {
				t.Errorf("InhibitDelayMaxSec = %v (set %v) from %q, want %v from %q; problems %q",
					conf.delay, conf.set, conf.from, tc.want, tc.from, conf.problems)
			}
		})
	}
}

func TestLogindConfIgnoresWhatLogindIgnoresAndSaysWhy(t *testing.T) {
	root := t.TempDir()
	writeConf(t, root, map[string]string{"etc/systemd/logind.conf": "[Login]\nInhibitDelayMaxSec=soon\nno equals sign\n"})
	conf := readLogindConf(root)
	if conf.set || len(conf.problems) != 2 || !strings.Contains(conf.problems[0], "etc/systemd/logind.conf:2") {
		t.Errorf("got %+v, want two problems and no value", conf)
	}
}

func TestTimespansParseAsSystemdParsesThem(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30": 30 * time.Second, "30s": 30 * time.Second, "1min 30s": 90 * time.Second, "1min30s": 90 * time.Second,
		"2 h": 2 * time.Hour, "1.5h": 90 * time.Minute, "500ms": 500 * time.Millisecond, "5m": 5 * time.Minute,
		"1d": 24 * time.Hour, "1w": 7 * 24 * time.Hour, "10seconds": 10 * time.Second, "3 minutes": 3 * time.Minute,
		"250000us": 250 * time.Millisecond, "1h 2m 3s 4ms": time.Hour + 2*time.Minute + 3*time.Second + 4*time.Millisecond,
		" 7 ": 7 * time.Second, "0": 0,
	} {
		if got, err := parseTimespan(in); err != nil || got != want {
			t.Errorf("parseTimespan(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "soon", "-5s", "5x", "5 s s", "1..2s", ".", "infinity", "99999999999y"} {
		if got, err := parseTimespan(in); err == nil {
			t.Errorf("parseTimespan(%q) = %v, want an error", in, got)
		}
	}
}

func TestAReloadBeyondTheBoundIsClamped(t *testing.T) {
	root := t.TempDir()
	writeConf(t, root, map[string]string{"etc/systemd/logind.conf": "[Login]\nInhibitDelayMaxSec=2h\n"})
	s := newLogindState(Options{InhibitDelayMax: time.Minute, ConfigRoot: root})
	if got := s.reload(0); got != MaxInhibitDelay {
		t.Errorf("reload = %v, want %v", got, MaxInhibitDelay)
	}
	if time.Duration(s.delay.Load()) != MaxInhibitDelay {
		t.Errorf("delay in force %v", time.Duration(s.delay.Load()))
	}
}

// A drop-in that is a FIFO, or a link to /dev/zero, is refused at once as
// not a regular file: the reload neither waits for a writer nor reads
// without end. A link to a regular file is read, as systemd reads it, and
// a link to /dev/null still masks.
func TestLogindConfReadsOnlyRegularFiles(t *testing.T) {
	root := t.TempDir()
	writeConf(t, root, map[string]string{
		"etc/systemd/logind.conf":               "[Login]\nInhibitDelayMaxSec=45\n",
		"srv/kubelet.conf":                      kubeletDropIn("70"),
		"usr/lib/systemd/logind.conf.d/30.conf": kubeletDropIn("600"),
	})
	dir := filepath.Join(root, "etc/systemd/logind.conf.d")
	must(t, os.MkdirAll(dir, 0o755))
	must(t, unix.Mkfifo(filepath.Join(dir, "10-fifo.conf"), 0o644))
	must(t, os.Symlink("/dev/zero", filepath.Join(dir, "20-zero.conf")))
	must(t, os.Symlink(os.DevNull, filepath.Join(dir, "30.conf")))
	must(t, os.Symlink(filepath.Join(root, "srv/kubelet.conf"), filepath.Join(dir, "40-link.conf")))
	done := make(chan logindConf, 1)
	go func() { done <- readLogindConf(root) }()
	var conf logindConf
	select {
	case conf = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("reading logind's configuration did not return within 5s")
	}
	if !conf.set || conf.delay != 70*time.Second || conf.from != "etc/systemd/logind.conf.d/40-link.conf" {
		t.Errorf("InhibitDelayMaxSec = %v from %q, want 70s from the linked drop-in; problems %q", conf.delay, conf.from, conf.problems)
	}
	if len(conf.problems) != 2 || !strings.Contains(conf.problems[0], "10-fifo.conf") || !strings.Contains(conf.problems[0], "not a regular file") ||
		!strings.Contains(conf.problems[1], "20-zero.conf") {
		t.Errorf("problems %q, want the FIFO's and /dev/zero's", conf.problems)
	}
}

// kubeletDropIn is the drop-in the kubelet writes (its
// OverrideInhibitDelay), for a shutdownGracePeriod of seconds.
func kubeletDropIn(seconds string) string {
	return "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=" + seconds + "\n"
}
