package e2e

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSdNotifyContainerSeesReady(t *testing.T) {
	e := start(t)
	// Play systemd: podman passes READY=1 from the container to the
	// NOTIFY_SOCKET it was given itself (a unit with Type=notify).
	sockPath := filepath.Join(t.TempDir(), "notify.sock")
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()

	saved := e.env
	e.env = append(append([]string(nil), saved...), "NOTIFY_SOCKET="+sockPath)
	c := e.runDetached(t, []string{"--sdnotify=container"}, taskNode(nil)...)
	e.env = saved

	var messages []string
	if err := sock.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for !ready(messages) {
		n, err := sock.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("no READY=1 within 30s; notify messages: %q\n%s", messages, c.logs(t))
		}
		if err != nil {
			t.Fatal(err)
		}
		messages = append(messages, string(buf[:n]))
	}
	t.Logf("notify messages: %q", messages)
	if got := e.inspect(t, c.name, "{{.State.Status}}"); got != "running" {
		t.Errorf("after READY the container is %s, want running", got)
	}
	// READY=1 follows the executor's start: its report, its first act, comes.
	c.waitFile(t, "executor.json")
}

func ready(messages []string) bool {
	for _, m := range messages {
		for line := range strings.Lines(m) {
			if strings.TrimSpace(line) == "READY=1" {
				return true
			}
		}
	}
	return false
}
