package bus

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// The tests' helper processes are this test binary run again with
// helperRole naming what it plays: a client of the bus in a process of its
// own, so that a test can put clients inside the executor's tree (its
// children) or outside it (the test process itself, when the executor is
// a helper).
const (
	helperRole = "LOGIND_TEST_HELPER"
	helperBus  = "LOGIND_TEST_BUS" // the socket's path
	helperN    = "LOGIND_TEST_N"   // how many, for the roles that take a count
)

func TestMain(m *testing.M) {
	if role := os.Getenv(helperRole); role != "" {
		os.Exit(runHelper(role))
	}
	os.Exit(m.Run())
}

// runHelper plays role. Every role waits for a line on stdin before it
// starts (so the test can admit it first), reports on stdout, and holds
// what it took until stdin closes.
func runHelper(role string) int {
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		return 2
	}
	path := os.Getenv(helperBus)
	n, _ := strconv.Atoi(os.Getenv(helperN))
	var keep []io.Closer
	switch role {
	case "kubelet":
		// The kubelet's own sequence, on godbus's shared system bus
		// connection found through DBUS_SYSTEM_BUS_ADDRESS.
		os.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+dbus.EscapeBusAddressValue(path))
		conn, err := dbus.SystemBus()
		if err != nil {
			fmt.Println("error: connect:", err)
			return 1
		}
		k := kubelet{conn}
		if _, err := k.currentInhibitDelay(); err != nil {
			fmt.Println("error: InhibitDelayMaxUSec:", err)
			return 1
		}
		if _, err := k.inhibitShutdown(); err != nil {
			fmt.Println("error: Inhibit:", err)
			return 1
		}
		if _, err := k.monitorShutdown(); err != nil {
			fmt.Println("error: AddMatch:", err)
			return 1
		}
		fmt.Println("locked")
	case "idle":
		// n connections that authenticate and then never say Hello; those
		// the bus refuses are counted out.
		for range n {
			c, err := net.Dial("unix", path)
			if err == nil {
				_, err = io.WriteString(c, "\x00AUTH EXTERNAL "+hexID(strconv.Itoa(os.Getuid()))+"\r\nBEGIN\r\n")
			}
			if err == nil {
				_, err = bufio.NewReader(c).ReadString('\n')
			}
			if err != nil {
				continue
			}
			keep = append(keep, c)
		}
		fmt.Printf("connected=%d\n", len(keep))
	case "dial":
		// Connect, and end at once: the connection outlives its peer.
		if _, err := net.Dial("unix", path); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("dialled")
		return 0
	case "hog":
		// As many delay locks as the bus gives, on one connection.
		conn, err := dbus.Connect("unix:path=" + dbus.EscapeBusAddressValue(path))
		if err != nil {
			fmt.Println("error: connect:", err)
			return 1
		}
		k := kubelet{conn}
		locks := 0
		for {
			if _, err = k.inhibitShutdown(); err != nil {
				break
			}
			locks++
		}
		fmt.Printf("locks=%d refused=%s\n", locks, dbusErrorName(err))
	default:
		fmt.Println("error: no role", role)
		return 2
	}
	io.Copy(io.Discard, in)
	for _, c := range keep {
		c.Close()
	}
	return 0
}

// helper is a running helper process.
type helper struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startHelper starts the test binary as a helper playing role against
// the bus at path. It waits for go before it does anything.
func startHelper(t *testing.T, role, path string, n int) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperRole+"="+role, helperBus+"="+path, helperN+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{t: t, cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	t.Cleanup(h.stop)
	return h
}

func (h *helper) pid() int { return h.cmd.Process.Pid }

// start lets the helper go and returns its report: its first line.
func (h *helper) start() string {
	h.t.Helper()
	if _, err := io.WriteString(h.stdin, "go\n"); err != nil {
		h.t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		l, _ := h.out.ReadString('\n')
		line <- strings.TrimSpace(l)
	}()
	select {
	case l := <-line:
		return l
	case <-time.After(20 * time.Second):
		h.t.Fatalf("helper %d: no report within 20s", h.pid())
		return ""
	}
}

// stop ends the helper: stdin closes, and it releases what it holds.
func (h *helper) stop() {
	h.stdin.Close()
	done := make(chan struct{})
	go func() {
		h.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		h.cmd.Process.Kill()
		<-done
	}
}
