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
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
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
	go request(ip, requests)
	go followLogs(filepath.Join(dir, "pods"))
	sampleLock(locks)
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

// sampleLock writes the lock's holder each time it changes.
func sampleLock(out *os.File) {
	last := ""
	for range time.Tick(20 * time.Millisecond) {
		if who := holder(); who != last {
			if _, err := out.WriteString(stamp() + " " + who + "\n"); err != nil {
				fail("write lock.log", err)
			}
			last = who
		}
	}
}

// holder is who holds the flock on the kubelet's lock file: its pid and
// whose cgroup it is in, the kubelet unit's or a pod's.
func holder() string {
	var st syscall.Stat_t
	if err := syscall.Stat(lockFile, &st); err != nil {
		return "none"
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return "none"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 1234 00:19:567 0 EOF"; a waiter's line
		// has "->" after the number.
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[1] != "FLOCK" {
			continue
		}
		dev := strings.Split(fs[5], ":")
		if len(dev) != 3 || dev[2] != strconv.FormatUint(st.Ino, 10) {
			continue
		}
		pid := fs[4]
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
	return "none"
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
