package cgroups

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sirupsen/logrus"
	"k8s.io/klog/v2"
)

// RouteLibraryLogs sends what github.com/opencontainers/cgroups logs
// through logrus's standard logger into klog, nodeinit's log on stdout,
// instead of logrus's own stderr text format. It sets up the process-wide
// logrus logger: main calls it once, after klog's verbosity is known.
func RouteLibraryLogs() {
	std := logrus.StandardLogger()
	std.SetOutput(io.Discard)
	std.SetReportCaller(true)
	std.SetLevel(logrus.InfoLevel)
	if klog.V(4).Enabled() {
		std.SetLevel(logrus.DebugLevel)
	}
	std.AddHook(klogHook{})
}

// klogHook writes each logrus entry to klog at the matching severity.
type klogHook struct{}

func (klogHook) Levels() []logrus.Level { return logrus.AllLevels }

func (klogHook) Fire(e *logrus.Entry) error {
	msg := "cgroup library: " + e.Message + formatFields(e.Data)
	// klog's own file:line would name this hook; say where the library
	// logged instead.
	if e.Caller != nil {
		msg += fmt.Sprintf(" (%s:%d)", filepath.Base(e.Caller.File), e.Caller.Line)
	}
	switch {
	case e.Level <= logrus.ErrorLevel:
		klog.Error(msg)
	case e.Level == logrus.WarnLevel:
		klog.Warning(msg)
	case e.Level == logrus.InfoLevel:
		klog.Info(msg)
	default:
		klog.V(4).Info(msg)
	}
	return nil
}

func formatFields(data logrus.Fields) string {
	if len(data) == 0 {
		return ""
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%v", k, data[k])
	}
	return b.String()
}
