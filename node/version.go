package node

import (
	"debug/buildinfo"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nodeinit/nodeinit/internal/cmdline"
	"github.com/nodeinit/nodeinit/internal/linux"
)

// KubeletVersion is the Kubernetes release of the kubelet code in the
// executor's program, as the Go build information in the program records
// it; the zero value is unknown. Release-dependent defaults (failCgroupV1,
// the KubeletInUserNamespace gate) are decided from it, and where it is
// unknown nodeinit assumes nothing.
type KubeletVersion struct {
	Major, Minor, Patch int
	// From says which record of the build information gave it.
	From string
}

// Known says the version could be read.
func (v KubeletVersion) Known() bool { return v.Major > 0 }

// AtLeast says the version is known and 1.minor or later.
func (v KubeletVersion) AtLeast(minor int) bool {
	return v.Known() && (v.Major > 1 || v.Major == 1 && v.Minor >= minor)
}

func (v KubeletVersion) String() string {
	if !v.Known() {
		return "unknown"
	}
	return fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch)
}

// ReadKubeletVersion reads the Kubernetes release of the executor's program
// without running it: path is looked up as execvp would, in the PATH of env
// (the executor's environment), and its Go build information (debug/buildinfo:
// a few KiB of the binary, no fork) is searched for k8s.io/kubernetes (see
// kubeletVersionOf). A script, a program that is not Go, or one whose build
// recorded no release gives the zero KubeletVersion.
func ReadKubeletVersion(path string, env []string) KubeletVersion {
	exe := lookPath(path, getenv(env, "PATH"))
	if exe == "" {
		return KubeletVersion{}
	}
	bi, err := buildinfo.ReadFile(exe)
	if err != nil {
		return KubeletVersion{}
	}
	return kubeletVersionOf(bi)
}

// kubeletVersionOf finds the release in a program's build information, in
// the records a kubelet (or a program that links the kubelet, such as a
// kubelet-executor) can have, first found wins:
//   - a dependency on k8s.io/kubernetes (a program of another module that
//     links the kubelet), or its replacement;
//   - k8s.io/kubernetes as the main module, with a release version: Go
//     records the module of the main package, so go build
//     k8s.io/kubernetes/cmd/kubelet from a module that requires
//     k8s.io/kubernetes vX.Y.Z (as make k8s builds it) records vX.Y.Z,
//     and a build in Kubernetes' tree at a clean release tag the tag;
//   - the -ldflags setting's k8s.io/component-base/version.gitVersion
//     (recorded only for a build without -trimpath);
//   - a dependency on k8s.io/kubelet or k8s.io/component-base, whose
//     v0.N.P is the release 1.N.P.
func kubeletVersionOf(bi *buildinfo.BuildInfo) KubeletVersion {
	modVersion := func(path string) string {
		for _, d := range bi.Deps {
			if d.Path != path {
				continue
			}
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			return d.Version
		}
		return ""
	}
	if v, ok := parseRelease(modVersion("k8s.io/kubernetes"), 1); ok {
		v.From = "its dependency k8s.io/kubernetes"
		return v
	}
	if bi.Main.Path == "k8s.io/kubernetes" {
		if v, ok := parseRelease(bi.Main.Version, 1); ok {
			v.From = "its main module k8s.io/kubernetes"
			return v
		}
	}
	for _, s := range bi.Settings {
		if s.Key != "-ldflags" {
			continue
		}
		const stamp = "k8s.io/component-base/version.gitVersion="
		if _, after, ok := strings.Cut(s.Value, stamp); ok {
			word, _, _ := strings.Cut(after, " ")
			if v, ok := parseRelease(strings.Trim(word, `'"`), 1); ok {
				v.From = "its -ldflags " + stamp + word
				return v
			}
		}
	}
	for _, m := range []string{"k8s.io/kubelet", "k8s.io/component-base"} {
		if v, ok := parseRelease(modVersion(m), 0); ok {
			v.Major, v.From = 1, "its dependency "+m
			return v
		}
	}
	return KubeletVersion{}
}

// parseRelease parses vMAJOR.MINOR.PATCH[-pre][+build] whose major is
// major; v0.0.0 (Kubernetes' placeholder for its staging modules) is none.
func parseRelease(s string, major int) (KubeletVersion, bool) {
	s, ok := strings.CutPrefix(s, "v")
	if !ok {
		return KubeletVersion{}, false
	}
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return KubeletVersion{}, false
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return KubeletVersion{}, false
		}
		n[i] = v
	}
	if n[0] != major || n[1] == 0 {
		return KubeletVersion{}, false
	}
	return KubeletVersion{Major: n[0], Minor: n[1], Patch: n[2]}, true
}

// lookPath finds the program name names as execvp would (the supervisor's
// rule): a name with a slash is a path, another is searched in pathList.
// "" when there is no such regular file.
func lookPath(name, pathList string) string {
	if name == "" {
		return ""
	}
	if strings.Contains(name, "/") {
		if linux.IsRegular(name) {
			return name
		}
		return ""
	}
	for _, dir := range filepath.SplitList(pathList) {
		if dir == "" {
			dir = "."
		}
		if p := filepath.Join(dir, name); linux.IsRegular(p) {
			return p
		}
	}
	return ""
}

// FeatureGate is the value the kubelet takes for gate, and where it is
// set: its --feature-gates flags (repeats merge, the last wins) over the
// featureGates of its configuration kc; where is empty when neither sets
// it, and the kubelet's default for its release applies.
func FeatureGate(args []string, kc KubeletConfig, gate string) (value bool, where string) {
	if v, ok := kc.FeatureGates[gate]; ok {
		value, where = v, "the kubelet's configuration "+strings.Join(kc.Files, " ")
	}
	gates, _ := cmdline.Map(args, "feature-gates", "=")
	if v, ok := gates[gate]; ok {
		value, _ = strconv.ParseBool(v)
		where = "the kubelet's --feature-gates"
	}
	return value, where
}

// UserNamespaceGate is the gate that lets the kubelet run in a user
// namespace: it then takes a /dev/kmsg it cannot open and kernel tunables
// it cannot write as warnings. Alpha (off by default) until v1.36, beta and
// on by default from v1.37.
const UserNamespaceGate = "KubeletInUserNamespace"

// UserNamespaceGateOnByDefault says the kubelet of version v turns
// UserNamespaceGate on by itself; false when v is unknown.
func UserNamespaceGateOnByDefault(v KubeletVersion) bool { return v.AtLeast(37) }

// TakesRuntimeCgroupDriver says whether the kubelet of version v asks the
// container runtime for its cgroup driver (the CRI's RuntimeConfig) and
// takes the one the runtime reports over its own cgroupDriver: the gate
// KubeletCgroupDriverFromCRI, alpha from v1.28, on by default from v1.31,
// locked on from v1.34. An unknown version is taken to ask, as every
// release still supported does.
func TakesRuntimeCgroupDriver(args []string, kc KubeletConfig, v KubeletVersion) bool {
	if !v.Known() || v.AtLeast(34) {
		return true
	}
	on, where := FeatureGate(args, kc, "KubeletCgroupDriverFromCRI")
	switch {
	case where != "":
		return on && v.AtLeast(28)
	default:
		return v.AtLeast(31)
	}
}
