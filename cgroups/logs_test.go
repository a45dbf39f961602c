package cgroups

import (
	"strings"
	"testing"

	"github.com/nodeinit/nodeinit/test/testenv"
	"github.com/sirupsen/logrus"
	"k8s.io/klog/v2"
)

func TestLibraryLogsGoToKlog(t *testing.T) {
	buf := testenv.CaptureLog(t)
	RouteLibraryLogs()

	logrus.WithField("path", "/sys/fs/cgroup").Warnf("falling back to %s", "securejoin")
	logrus.Info("plain info")
	logrus.Debug("hidden at the default verbosity")
	klog.Flush()

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), buf.String())
	}
	if !strings.HasPrefix(lines[0], "W") || !strings.HasSuffix(lines[0], "cgroup library: falling back to securejoin path=/sys/fs/cgroup (logs_test.go:16)") {
		t.Errorf("warning line %q", lines[0])
	}
	if !strings.HasPrefix(lines[1], "I") || !strings.HasSuffix(lines[1], "cgroup library: plain info (logs_test.go:17)") {
		t.Errorf("info line %q", lines[1])
	}
}
