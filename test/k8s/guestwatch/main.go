// Command guestwatch is what the DaemonSet test on the modern host runs in
// its guest, where the Service's cluster IP and the kubelet's lock file
// are. It writes, each line stamped with the guest's clock (the kubelets'
// too) in Unix seconds:
//
//   - requests.log: "T ok SECONDS" (how long the answer took) or
//     "T fail ERROR" for a request to the Service every 50 ms, each on a new
//     connection with 5 s to answer: under TCG a guest busy starting a
//     container can hold a process off the CPU for over a second, and a
//     request answered late is not lost;
//   - lock.log: "T host PID", "T pod UID PID", "T other PID CGROUP" or
//     "T none" each time the holder of the kubelet's lock changes, from
//     /proc/locks every 20 ms (never opening the file: an open is the
//     contention the node's own kubelet exits on);
//   - kubelets.log: "T PID:ROLE ..." (or "T none") each time the kubelet
//     processes or their roles change, from /proc every 500 ms (each
//     sample reads every process's name, which under TCG costs), each
//     kubelet's ROLE one of holder (of the lock), waiting (on it, blocked
//     in flock) or unlocked (neither: starting, or ending), with
//     "+serving" when it has a listening TCP socket and "+nolockfile" when
//     its command line names no --lock-file=/run/lock/kubelet.lock. The
//     lock is read first and the processes after it: a kubelet takes the
//     lock seconds before it opens a port, so one serving held the lock
//     when it was read. An ending kubelet closes its lock and its ports
//     one descriptor after another, so one unlocked and serving is so
//     only when seen so in two samples one after another (500 ms apart);
//     the first shows it "unlocked+closing";
//   - pods/<dir>/node/<n>.log: the DaemonSet pods' logs as the runtime
//     writes them, each followed from its open descriptor to its end, so
//     nothing is lost when the kubelet removes a deleted pod's logs.
//
// A record it cannot write ends it with exit code 1 and the error on its
// standard error: the test, which counts the requests it sees and checks
// the watch still runs, then fails rather than read a record with holes.
//
// Usage: guestwatch SERVICE-IP DIR. It runs until killed.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const lockFile = "/run/lock/kubelet.lock"

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: guestwatch SERVICE-IP DIR")
		os.Exit(2)
	}
	ip, dir := os.Args[1], os.Args[2]
	requests, err := os.OpenFile(filepath.Join(dir, "requests.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	locks, err := os.OpenFile(filepath.Join(dir, "lock.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kubelets, err := os.OpenFile(filepath.Join(dir, "kubelets.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go request(ip, requests)
	go followLogs(filepath.Join(dir, "pods"))
	sampleLock(locks, kubelets)
}

// fail ends the watch on an error it cannot record around.
func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "guestwatch: %s: %v\n", what, err)
	os.Exit(1)
}

func stamp() string { return strconv.FormatFloat(float64(time.Now().UnixNano())/1e9, 'f', 6, 64) }

// request asks the Service every 50 ms, each request in a goroutine of
// its own so that a slow one does not delay the next.
func request(ip string, out *os.File) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	lines := make(chan string, 64)
	go func() {
		for l := range lines {
			if _, err := out.WriteString(l); err != nil {
				fail("write requests.log", err)
			}
		}
	}()
	for range time.Tick(50 * time.Millisecond) {
		go func() {
			at, sent := stamp(), time.Now()
			resp, err := client.Get("http://" + ip + "/")
			if err == nil {
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("%s", resp.Status)
				}
			}
			if err != nil {
				lines <- at + " fail " + strings.ReplaceAll(err.Error(), "\n", " ") + "\n"
			} else {
				lines <- at + " ok " + strconv.FormatFloat(time.Since(sent).Seconds(), 'f', 3, 64) + "\n"
			}
		}()
	}
}

// sampleLock writes the lock's holder each time it changes, and every
// 500 ms the kubelets' roles (kubelets.log) when they change.
func sampleLock(out, kubeletsOut *os.File) {
	last, lastKubelets := "", ""
	closing := map[string]bool{}
	tick := time.Tick(20 * time.Millisecond)
	for n := 0; ; n++ {
		<-tick
		pid, waiters := lockState()
		if who := holder(pid); who != last {
			if _, err := out.WriteString(stamp() + " " + who + "\n"); err != nil {
				fail("write lock.log", err)
			}
			last = who
		}
		if n%25 != 0 {
			continue
		}
		var k string
		if k, closing = kubelets(pid, waiters, closing); k != lastKubelets {
			if _, err := kubeletsOut.WriteString(stamp() + " " + k + "\n"); err != nil {
				fail("write kubelets.log", err)
			}
			lastKubelets = k
		}
	}
}

// lockState reads /proc/locks for the flock on the kubelet's lock file:
// the pid that holds it ("" when none) and those blocked waiting on it.
func lockState() (string, map[string]bool) {
	waiters := map[string]bool{}
	var st syscall.Stat_t
	if err := syscall.Stat(lockFile, &st); err != nil {
		return "", waiters
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		fail("read /proc/locks", err)
	}
	held := ""
	for _, l := range strings.Split(string(b), "\n") {
		// "1: FLOCK  ADVISORY  WRITE 1234 00:19:567 0 EOF"; a waiter's line
		// has "->" after the number.
		fs := strings.Fields(l)
		waiting := len(fs) > 1 && fs[1] == "->"
		if waiting {
			fs = fs[1:]
		}
		if len(fs) < 6 || fs[1] != "FLOCK" {
			continue
		}
		dev := strings.Split(fs[5], ":")
		if len(dev) != 3 || dev[2] != strconv.FormatUint(st.Ino, 10) {
			continue
		}
		if waiting {
			waiters[fs[4]] = true
		} else if held == "" {
			held = fs[4]
		}
	}
	return held, waiters
}

// kubelets describes every kubelet process: its pid and role (see the
// package's comment), in pid order, or "none". closing are the kubelets
// seen unlocked with a listening socket in the last sample; it returns
// those of this one.
func kubelets(holder string, waiters, closing map[string]bool) (string, map[string]bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		fail("read /proc", err)
	}
	listening := listeningSockets()
	seen := map[string]bool{}
	var out []string
	for _, e := range entries {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		if comm, err := os.ReadFile("/proc/" + pid + "/comm"); err != nil || strings.TrimSpace(string(comm)) != "kubelet" {
			continue
		}
		role := "unlocked"
		switch {
		case pid == holder:
			role = "holder"
		case waiters[pid]:
			role = "waiting"
		}
		fds, _ := os.ReadDir("/proc/" + pid + "/fd")
		for _, fd := range fds {
			if l, err := os.Readlink("/proc/" + pid + "/fd/" + fd.Name()); err == nil && listening[l] {
				switch {
				case role != "unlocked" || closing[pid]:
					role += "+serving"
				default:
					role += "+closing"
				}
				if role == "unlocked+closing" || role == "unlocked+serving" {
					seen[pid] = true
				}
				break
			}
		}
		argv, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		args := strings.Split(string(argv), "\x00")
		if len(argv) > 0 && !slices.Contains(args, "--lock-file="+lockFile) && !hasPair(args, "--lock-file", lockFile) {
			role += "+nolockfile"
		}
		out = append(out, pid+":"+role)
	}
	if len(out) == 0 {
		return "none", seen
	}
	slices.SortFunc(out, func(a, b string) int {
		x, _ := strconv.Atoi(a[:strings.IndexByte(a, ':')])
		y, _ := strconv.Atoi(b[:strings.IndexByte(b, ':')])
		return x - y
	})
	return strings.Join(out, " "), seen
}

// hasPair says whether args has flag followed by value.
func hasPair(args []string, flag, value string) bool {
	i := slices.Index(args, flag)
	return i >= 0 && i+1 < len(args) && args[i+1] == value
}

// listeningSockets are the listening TCP sockets of the guest's network
// namespace, as a socket's descriptor links to them: "socket:[INODE]".
func listeningSockets() map[string]bool {
	out := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			fail("read "+f, err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			// sl local rem st(0A: LISTEN) tx:rx tr:when retrnsmt uid timeout inode
			fs := strings.Fields(l)
			if len(fs) > 9 && fs[3] == "0A" {
				out["socket:["+fs[9]+"]"] = true
			}
		}
	}
	return out
}

// holder is who holds the flock on the kubelet's lock file, the pid
// lockState read: its pid and whose cgroup it is in, the kubelet unit's or
// a pod's.
func holder(pid string) string {
	if pid == "" {
		return "none"
	}
	b, _ := os.ReadFile("/proc/" + pid + "/cgroup")
	cg := strings.TrimPrefix(strings.TrimSpace(string(b)), "0::")
	switch {
	case strings.Contains(cg, "/kubelet.service"):
		return "host " + pid
	case strings.Contains(cg, "-pod"):
		uid := cg[strings.LastIndex(cg, "-pod")+4:]
		uid, _, _ = strings.Cut(uid, ".slice")
		return "pod " + strings.ReplaceAll(uid, "_", "-") + " " + pid
	}
	return "other " + pid + " " + cg
}

// followLogs copies each DaemonSet pod's log file into dir as it grows,
// from the descriptor it opened: the copy ends with what the runtime last
// wrote, even after the file is removed.
func followLogs(dir string) {
	followed := map[string]bool{}
	for range time.Tick(250 * time.Millisecond) {
		files, _ := filepath.Glob("/var/log/pods/kube-system_nodeinit-node-*/node/*.log")
		for _, f := range files {
			if followed[f] {
				continue
			}
			in, err := os.Open(f)
			if err != nil {
				continue
			}
			dst := filepath.Join(dir, strings.TrimPrefix(f, "/var/log/pods/"))
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				fail("copy of "+f, err)
			}
			out, err := os.Create(dst)
			if err != nil {
				fail("copy of "+f, err)
			}
			followed[f] = true
			go func() {
				for {
					if _, err := io.Copy(out, in); err != nil {
						fail("copy of "+f, err)
					}
					time.Sleep(100 * time.Millisecond)
				}
			}()
		}
	}
}
