package node

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/nodeinit/nodeinit/cgroups"
	"github.com/nodeinit/nodeinit/internal/adjustment"
	"github.com/nodeinit/nodeinit/internal/cmdline"
)

// The kubelet takes its capacity from the machine, never from its cgroup
// root (kubelet v1.34, pkg/kubelet/cm/container_manager_linux.go), and
// computes the Node's allocatable as
//
//	capacity - systemReserved - kubeReserved - hard eviction threshold
//
// (pkg/kubelet/cm/node_container_manager_linux.go
// GetNodeAllocatableReservation; the threshold, memory.available, counts
// for memory only), and, with enforceNodeAllocatable's "pods" (its
// default), limits its kubepods cgroup to capacity - systemReserved -
// kubeReserved. Inside a container whose cgroup (or an ancestor) limits
// memory, CPU or pids, that is the host's size: the scheduler would
// over-commit the node, and the container's limit would kill pods instead
// of the kubelet evicting them.
//
// nodeinit sizes the node to the container with --system-reserved: what
// lies outside the container (the host, minus the container's limit) is
// reserved for "the system", as the host's own daemons are on a machine.
// For each resource with a limit L below the kubelet's capacity C it
// reserves C - L, so that the kubepods cgroup gets C - (C - L) - K = L - K
// and the Node's allocatable is L - K - E (K: kubeReserved, E: the hard
// eviction threshold). kubeReserved and the eviction threshold stay the
// kubelet's, counted inside the container, where the kubelet runs. The
// operator's own systemReserved is never overridden: where it is the
// larger (the stricter), it holds.

// Resource names, as the kubelet's --system-reserved takes them.
const (
	resourceMemory = "memory"
	resourceCPU    = "cpu"
	resourcePID    = "pid"
)

// Sizing is how nodeinit sizes the Node to the container its kubelet's
// cgroup root lies in: the --system-reserved it adds, and what the log
// says about it.
type Sizing struct {
	// SystemReserved is the value of the --system-reserved flag nodeinit
	// adds to the executor's arguments; empty for none. It holds every
	// resource of the kubelet's own systemReserved too: the flag replaces
	// the configuration file's map.
	SystemReserved string
	// Notes are the log lines: one per limit found, with its reason.
	Notes []adjustment.Line
}

// SizeToContainer reads the machine the kubelet will see and sizes the
// Node to limits (cgroups.Result.Limits, read from the kubelet's cgroup
// root and its ancestors), with the executor's arguments and kubelet
// configuration kc. An error reading the machine or the limits is a
// warning in the notes, and nothing is reserved for what is unknown.
func SizeToContainer(args []string, kc KubeletConfig, limits cgroups.Limits, root string, limitsErr error) Sizing {
	var s Sizing
	if limitsErr != nil {
		s.Notes = append(s.Notes, adjustment.Line{Warning: true, Msg: "Cannot read every limit of the kubelet's cgroup root; sizing the node to those read",
			KV: []any{"cgroupRoot", root, "err", limitsErr}})
	}
	m, err := ReadMachine("/")
	if err != nil {
		s.Notes = append(s.Notes, adjustment.Line{Warning: true, Msg: "Cannot read the machine's capacity as the kubelet does; the node is not sized to its container",
			KV: []any{"err", err}})
		return s
	}
	sz := sizeNode(m, limits, root, args, kc)
	sz.Notes = append(s.Notes, sz.Notes...)
	return sz
}

// reservation is one of the kubelet's reservation maps as it will take
// it: from its flag, which replaces the configuration's map, or from the
// configuration file.
type reservation struct {
	values map[string]string
	from   string
}

// kubeletReservation is the map the kubelet takes for a --NAME flag
// (system-reserved, kube-reserved) or its configuration's field: the
// flag, when given, replaces the field; repeated, it accumulates
// (component-base's MapStringString).
func kubeletReservation(args []string, flag string, field map[string]string, kc KubeletConfig, fieldName string, sep string) reservation {
	if m, set := cmdline.Map(args, flag, sep); set {
		return reservation{m, "the executor's --" + flag}
	}
	if field == nil {
		return reservation{nil, ""}
	}
	return reservation{field, fieldName + " of the kubelet's configuration " + strings.Join(kc.Files, " ")}
}

// amount is one resource's value of a reservation, in the unit sizeNode
// counts in, and where it came from ("" for none).
func (r reservation) amount(resource string, scale int64) (int64, string, error) {
	v, ok := r.values[resource]
	if !ok {
		return 0, "", nil
	}
	q, err := ParseQuantity(v)
	if err != nil {
		return 0, "", fmt.Errorf("%s=%s in %s: %w", resource, v, r.from, err)
	}
	return ceilScaled(q, scale), fmt.Sprintf("%s=%s from %s", resource, v, r.from), nil
}

// sizeNode is SizeToContainer's computation, from values.
func sizeNode(m Machine, limits cgroups.Limits, root string, args []string, kc KubeletConfig) Sizing {
	var s Sizing
	note := func(warning bool, msg string, kv ...any) {
		s.Notes = append(s.Notes, adjustment.Line{Warning: warning, Msg: msg, KV: kv})
	}
	narrowed := limits.CPU.Found() && (limits.CPU.Value < int64(m.CPUs)*1000 || !strings.HasPrefix(limits.CPU.From, "cpuset."))
	if !limits.Memory.Found() && !narrowed && !limits.Pids.Found() {
		note(false, "The kubelet's cgroup root and its ancestors limit no memory, CPU or pids: the node keeps the machine's size",
			"cgroupRoot", root)
		return s
	}
	rs := readReservations(args, kc)

	newSystem := map[string]string{}
	for k, v := range rs.system.values {
		newSystem[k] = v
	}
	changed := false
	for _, r := range []resourceLimit{
		{resourceMemory, limits.Memory, m.Memory, "MemTotal of /proc/meminfo", 1, "bytes"},
		{resourceCPU, limits.CPU, int64(m.CPUs) * 1000, "the machine's online CPUs, as cAdvisor counts them", 1000, "millicores"},
		{resourcePID, limits.Pids, m.Pids, "the smaller of kernel.pid_max and kernel.threads-max", 1, "processes"},
	} {
		line, reserved := rs.size(r)
		if line != nil {
			s.Notes = append(s.Notes, *line)
		}
		if reserved != "" {
			newSystem[r.name] = reserved
			changed = true
		}
	}
	if !changed {
		return s
	}
	s.SystemReserved = formatReservation(newSystem)
	if enforce := kubeletEnforcement(args, kc); !slices.Contains(enforce, "pods") {
		note(false, "The kubelet's enforceNodeAllocatable has no pods: its kubepods cgroup gets no allocatable limits; the container's limits still hold above it",
			"enforceNodeAllocatable", strings.Join(enforce, ","))
	}
	note(false, "Adding --system-reserved to the executor, so that the Node's allocatable fits its container (--size-node-to-container=false turns this off)",
		"systemReserved", s.SystemReserved, "cgroupRoot", root)
	return s
}

// reservations are the kubelet's reservations as it will take them, from
// the executor's arguments and the kubelet's configuration.
type reservations struct {
	system, kube, eviction reservation
	// reservedCPUs, when set, replaces the cpu of systemReserved.
	reservedCPUs, reservedCPUsFrom string
}

func readReservations(args []string, kc KubeletConfig) reservations {
	rs := reservations{
		system:   kubeletReservation(args, "system-reserved", kc.SystemReserved, kc, "systemReserved", "="),
		kube:     kubeletReservation(args, "kube-reserved", kc.KubeReserved, kc, "kubeReserved", "="),
		eviction: kubeletReservation(args, "eviction-hard", kc.EvictionHard, kc, "evictionHard", "<"),
	}
	// Without a --config file the kubelet has no default threshold, and
	// ReadKubeletConfig has set none (see defaultEvictionHard).
	if kc.evictionDefaulted && rs.eviction.from != "" && !strings.HasPrefix(rs.eviction.from, "the executor's") {
		rs.eviction.from = "the kubelet's default evictionHard (its --config file sets none)"
	}
	if ignore, _, _ := cmdline.Bool(args, "experimental-allocatable-ignore-eviction"); ignore {
		rs.eviction = reservation{}
	}
	rs.reservedCPUs, rs.reservedCPUsFrom = kc.ReservedSystemCPUs, "reservedSystemCPUs of the kubelet's configuration "+strings.Join(kc.Files, " ")
	if v, set := cmdline.Value(args, "reserved-cpus"); set {
		rs.reservedCPUs, rs.reservedCPUsFrom = v, "the executor's --reserved-cpus"
	}
	return rs
}

// resourceLimit is the container's limit of one resource, against the
// kubelet's capacity of it.
type resourceLimit struct {
	name     string
	limit    cgroups.Limit
	capacity int64
	capFrom  string
	scale    int64 // of a quantity to the unit counted in
	unit     string
}

// size is the system-reserved of one resource that fits the Node's
// allocatable into the container's limit ("" for none to pass: no limit,
// or the kubelet's own is the stricter) and the log line that says so and
// why (nil: nothing to say).
func (rs reservations) size(r resourceLimit) (*adjustment.Line, string) {
	note := func(warning bool, msg string, kv ...any) *adjustment.Line {
		return &adjustment.Line{Warning: warning, Msg: msg, KV: kv}
	}
	if !r.limit.Found() || r.limit.Value >= r.capacity && strings.HasPrefix(r.limit.From, "cpuset.") {
		// Every cpuset lists CPUs, a host's root all of them: only
		// a narrower one is a limit.
		return nil, ""
	}
	kv := []any{"resource", r.name, "limit", r.limit.Value, "unit", r.unit, "limitFrom", r.limit.From,
		"capacity", r.capacity, "capacityFrom", r.capFrom}
	if r.limit.Value >= r.capacity {
		return note(false, "The container's limit is no smaller than the kubelet's capacity, which it sees already (lxcfs, or a limit above the machine): nothing to reserve", kv...), ""
	}
	if r.name == resourceCPU && rs.reservedCPUs != "" {
		return note(true, "The kubelet takes its CPU reservation from its reserved CPUs, which replace the cpu of --system-reserved: nodeinit cannot fit the Node's allocatable cpu into the container's limit",
			append(kv, "reservedCPUs", rs.reservedCPUs+" from "+rs.reservedCPUsFrom)...), ""
	}
	own, ownFrom, err1 := rs.system.amount(r.name, r.scale)
	kubeRes, kubeFrom, err2 := rs.kube.amount(r.name, r.scale)
	var evict int64
	var evictFrom string
	var err3 error
	if r.name == resourceMemory {
		evict, evictFrom, err3 = evictionThreshold(rs.eviction, r.capacity)
	}
	if err := firstError(err1, err2, err3); err != nil {
		return note(true, "Cannot read the kubelet's reservations: the node is not sized for this resource", append(kv, "err", err)...), ""
	}
	need := r.capacity - r.limit.Value
	room := max(r.capacity-kubeRes-evict, 0) // a reservation beyond capacity is fatal to the kubelet
	reserve := min(need, room)
	kv = append(kv, "kubeReserved", orNone(kubeRes, kubeFrom))
	if r.name == resourceMemory {
		kv = append(kv, "evictionHard", orNone(evict, evictFrom))
	}
	if own >= reserve {
		return note(false, "The kubelet's own system-reserved is the stricter: kept",
			append(kv, "systemReserved", own, "systemReservedFrom", ownFrom, "nodeinitWouldReserve", reserve,
				"allocatable", max(r.capacity-own-kubeRes-evict, 0))...), ""
	}
	reserved := strconv.FormatInt(reserve, 10)
	if r.name == resourceCPU {
		reserved += "m"
	}
	was := "none"
	if ownFrom != "" {
		was = ownFrom
	}
	kv = append(kv, "systemReserved", reserve, "reason", "capacity - limit: what lies outside the container", "replaces", was,
		"allocatable", max(r.capacity-reserve-kubeRes-evict, 0))
	if need > room {
		return note(true, "The container's limit is below the kubelet's kubeReserved and hard eviction threshold: the node gets no allocatable of this resource", kv...), reserved
	}
	return note(false, "Sizing the node to its container's limit", kv...), reserved
}

// evictionThreshold is the kubelet's hard eviction threshold on
// memory.available, in bytes: a quantity, or a percentage of the capacity
// computed as the kubelet does (float32 percentage, truncated).
func evictionThreshold(e reservation, capacity int64) (int64, string, error) {
	v, ok := e.values["memory.available"]
	if !ok {
		return 0, "", nil
	}
	from := "memory.available<" + v + " from " + e.from
	if pct, isPct := strings.CutSuffix(v, "%"); isPct {
		f, err := strconv.ParseFloat(pct, 32)
		if err != nil {
			return 0, "", fmt.Errorf("memory.available<%s in %s: not a percentage", v, e.from)
		}
		return int64(float64(capacity) * float64(float32(f)/100)), from, nil
	}
	q, err := ParseQuantity(v)
	if err != nil {
		return 0, "", fmt.Errorf("memory.available<%s in %s: %w", v, e.from, err)
	}
	return ceilScaled(q, 1), from, nil
}

// kubeletEnforcement is the kubelet's enforceNodeAllocatable: its flag,
// else its configuration's, else its default, pods.
func kubeletEnforcement(args []string, kc KubeletConfig) []string {
	if vals := cmdline.Values(args, "enforce-node-allocatable"); len(vals) > 0 {
		var out []string
		for _, v := range vals {
			out = append(out, strings.Split(v, ",")...)
		}
		return out
	}
	if kc.EnforceNodeAllocatable != nil {
		return kc.EnforceNodeAllocatable
	}
	return []string{"pods"}
}

// formatReservation writes a reservation map as --system-reserved takes
// it, sorted by resource.
func formatReservation(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = k + "=" + m[k]
	}
	return strings.Join(pairs, ",")
}

func orNone(v int64, from string) string {
	if from == "" {
		return "none"
	}
	return fmt.Sprintf("%d (%s)", v, from)
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
