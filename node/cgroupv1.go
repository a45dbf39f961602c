package node

import (
	"fmt"
	"strings"

	"github.com/nodeinit/nodeinit/internal/cmdline"
)

// failCgroupV1Since is the first release whose kubelet defaults
// failCgroupV1 to true: it then exits at start on a cgroup v1 host
// (pkg/kubelet/apis/config/v1beta1/defaults.go; 1.31 to 1.34 default it
// to false).
const failCgroupV1Since = 35

// CgroupV1Refusal is one line saying that the kubelet of version v, with
// its arguments args and configuration kc, exits at start on a cgroup v1
// host ("kubelet is configured to not run on a host using cgroup v1"), and
// what to set; "" when it runs there, or when nodeinit cannot tell (v
// unknown, or a --fail-cgroupv1 value the kubelet refuses by itself).
//
// The kubelet calls a host cgroup v1 when /sys/fs/cgroup is not a cgroup2
// mount (libcontainer's IsCgroup2UnifiedMode): a hybrid host, with cgroup2
// at /sys/fs/cgroup/unified, is cgroup v1 to it. Its --fail-cgroupv1 flag
// (the last one; bare, it means true) wins over failCgroupV1 in its
// configuration (the --config file, then the --config-dir drop-ins);
// without either the default is true from v1.35 on.
//
// nodeinit only says so: running on cgroup v1, which upstream no longer
// supports, is the operator's decision, not an adjustment to the
// container (docs/real-node.md).
func CgroupV1Refusal(args []string, kc KubeletConfig, v KubeletVersion) string {
	if !v.Known() {
		return ""
	}
	flag, set, err := cmdline.Bool(args, "fail-cgroupv1")
	if err != nil {
		return ""
	}
	files := strings.Join(kc.Files, " ")
	var why, fix string
	switch {
	case set && !flag:
		return ""
	case set && kc.FailCgroupV1 != nil && !*kc.FailCgroupV1:
		why = fmt.Sprintf("its --fail-cgroupv1=true overrides failCgroupV1: false in %s", files)
		fix = "drop --fail-cgroupv1 from its command line"
	case set:
		why = "its command line says --fail-cgroupv1=true"
		fix = "pass --fail-cgroupv1=false"
	case kc.FailCgroupV1 != nil && !*kc.FailCgroupV1:
		return ""
	case kc.FailCgroupV1 != nil:
		why = "failCgroupV1 is true in " + files
		fix = "set failCgroupV1: false there"
	case !v.AtLeast(failCgroupV1Since):
		return ""
	default:
		why = fmt.Sprintf("failCgroupV1 is unset, and a kubelet from v1.%d on defaults it to true", failCgroupV1Since)
		fix = "set failCgroupV1: false in " + kubeletConfigFile(kc)
	}
	return fmt.Sprintf("The kubelet (%s, read from %s) will exit at start on this cgroup v1 host (/sys/fs/cgroup is not a cgroup2 mount): %s; "+
		"to run the node on cgroup v1 anyway, which upstream no longer supports, %s, or move the host to cgroup v2", v, v.From, why, fix)
}

// kubeletConfigFile names where a kubelet setting goes: the --config file,
// else the file the kubelet would need to be given.
func kubeletConfigFile(kc KubeletConfig) string {
	if kc.File != "" {
		return kc.File
	}
	if len(kc.Files) > 0 {
		return "a drop-in of its --config-dir"
	}
	return "its configuration (a --config file)"
}
