package node

import (
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeinit/nodeinit/cgroups"
	"github.com/nodeinit/nodeinit/config"
)

func TestReadMachineReadsWhatTheKubeletReads(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"proc/meminfo":                                             "MemTotal:       24683584 kB\nMemFree:        22188400 kB\n",
		"proc/sys/kernel/pid_max":                                  "32768\n",
		"proc/sys/kernel/threads-max":                              "192726\n",
		"sys/devices/system/cpu/online":                            "0-2\n",
		"sys/devices/system/cpu/cpu0/topology/core_id":             "0\n",
		"sys/devices/system/cpu/cpu0/topology/physical_package_id": "0\n",
		"sys/devices/system/cpu/cpu1/topology/core_id":             "1\n",
		"sys/devices/system/cpu/cpu1/topology/physical_package_id": "0\n",
		// cpu2 is online but has no topology; cpu3 has one but is offline:
		// cAdvisor counts neither.
		"sys/devices/system/cpu/cpu2/online":                       "1\n",
		"sys/devices/system/cpu/cpu3/topology/core_id":             "3\n",
		"sys/devices/system/cpu/cpu3/topology/physical_package_id": "0\n",
		"sys/devices/system/cpu/cpufreq/policy0":                   "",
	}
	for f, text := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := ReadMachine(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Machine{Memory: 24683584 * 1024, CPUs: 2, Pids: 32768}); m != want {
		t.Errorf("got %+v, want %+v", m, want)
	}
	// Without an online list every CPU with a topology counts.
	if err := os.Remove(filepath.Join(root, "sys/devices/system/cpu/online")); err != nil {
		t.Fatal(err)
	}
	if m, err := ReadMachine(root); err != nil || m.CPUs != 3 {
		t.Errorf("without an online list: %d CPUs (%v), want 3", m.CPUs, err)
	}
}

func TestReadMachineOfThisHost(t *testing.T) {
	m, err := ReadMachine("/")
	if err != nil {
		t.Fatal(err)
	}
	if m.Memory <= 0 || m.CPUs <= 0 || m.Pids <= 0 {
		t.Errorf("machine %+v", m)
	}
}

func TestParseQuantity(t *testing.T) {
	for s, want := range map[string]string{
		"3Gi": "3221225472", "100Mi": "104857600", "1.5Ki": "1536", "1G": "1000000000", "500m": "1/2",
		"2": "2", "1e3": "1000", "2E-3": "1/500", "1E": "1000000000000000000", "1Ei": "1152921504606846976",
		"0.1": "1/10", "22054764544": "22054764544",
	} {
		got, err := ParseQuantity(s)
		if err != nil {
			t.Errorf("ParseQuantity(%q): %v", s, err)
			continue
		}
		if w, _ := new(big.Rat).SetString(want); got.Cmp(w) != 0 {
			t.Errorf("ParseQuantity(%q) = %s, want %s", s, got.RatString(), want)
		}
	}
	for _, bad := range []string{"", "Gi", "3GB", "1.2.3", "x", "1e99"} {
		if _, err := ParseQuantity(bad); err == nil {
			t.Errorf("ParseQuantity(%q): no error", bad)
		}
	}
}

// host is the machine of the sizing tests: 23.5 GiB, 2 CPUs, pid_max 32768.
var host = Machine{Memory: 24683584 * 1024, CPUs: 2, Pids: 32768}

// container is a 3 GiB, 1-CPU, 4096-process cgroup.
var container = cgroups.Limits{
	Memory: cgroups.Limit{Value: 3 << 30, From: "memory.limit_in_bytes of cgroup /node"},
	CPU:    cgroups.Limit{Value: 1000, From: "cpu.cfs_quota_us of cgroup /node"},
	Pids:   cgroups.Limit{Value: 4096, From: "pids.max of cgroup /node"},
}

// allocatable is what the kubelet v1.34 computes from its reservations
// (pkg/kubelet/cm GetNodeAllocatableReservation, nodestatus
// MachineInfo): capacity - systemReserved - kubeReserved - the hard
// eviction threshold on memory.available, at least 0; the kubepods cgroup
// gets the same without the eviction threshold. Written apart from
// sizeNode: it reads the final --system-reserved, --kube-reserved and
// eviction threshold, as the kubelet does.
func allocatable(t *testing.T, m Machine, system, kube map[string]string, evictMemory int64, resource string) (node, kubepods int64) {
	t.Helper()
	capacity := map[string]int64{"memory": m.Memory, "cpu": int64(m.CPUs) * 1000, "pid": m.Pids}[resource]
	scale := map[string]int64{"memory": 1, "cpu": 1000, "pid": 1}[resource]
	reserved := int64(0)
	for _, mp := range []map[string]string{system, kube} {
		if v, ok := mp[resource]; ok {
			q, err := ParseQuantity(v)
			if err != nil {
				t.Fatal(err)
			}
			reserved += ceilScaled(q, scale)
		}
	}
	if resource != "memory" {
		evictMemory = 0
	}
	return max(capacity-reserved-evictMemory, 0), capacity - reserved
}

func parseReservation(s string) map[string]string {
	m := map[string]string{}
	for pair := range strings.SplitSeq(s, ",") {
		if k, v, ok := strings.Cut(pair, "="); ok {
			m[k] = v
		}
	}
	return m
}

func TestSizeNodeToContainer(t *testing.T) {
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const kind = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	bare := file("bare.yaml", kind)
	withReserved := file("reserved.yaml", kind+"systemReserved: {memory: 1Gi, ephemeral-storage: 1Gi}\nkubeReserved: {memory: 256Mi, cpu: 100m}\nevictionHard: {memory.available: 5%}\n")
	greedy := file("greedy.yaml", kind+"systemReserved: {memory: 21Gi}\n")
	file("drop-ins/10-eviction.conf", kind+"evictionHard: {memory.available: 200Mi}\n")
	pinned := file("pinned.yaml", kind+"reservedSystemCPUs: \"0\"\nenforceNodeAllocatable: [none]\n")
	noEviction := file("no-eviction.yaml", kind+"evictionHard: {}\n")
	mergedEviction := file("merged-eviction.yaml", kind+"evictionHard: {nodefs.available: 5%}\nmergeDefaultEvictionSettings: true\n")
	justAbove := cgroups.Limits{Memory: cgroups.Limit{Value: 300 << 20, From: "memory.max of cgroup /small"}}

	const gi = int64(1) << 30
	tests := []struct {
		name     string
		machine  Machine
		limits   cgroups.Limits
		args     []string
		want     string // the --system-reserved value; "" for none
		evict    int64  // the kubelet's hard eviction threshold on memory, bytes
		notes    []string
		warnings []string
	}{
		{name: "no limits: nothing", machine: host, args: []string{"--config=" + bare},
			notes: []string{"limit no memory, CPU or pids"}},
		{name: "the host's cpuset is no limit", machine: host, args: []string{"--config=" + bare},
			limits: cgroups.Limits{CPU: cgroups.Limit{Value: 2000, From: "cpuset.effective_cpus of cgroup / (0-1)"}},
			notes:  []string{"limit no memory, CPU or pids"}},
		{name: "a narrower cpuset", machine: host, args: []string{"--config=" + bare},
			limits: cgroups.Limits{CPU: cgroups.Limit{Value: 1000, From: "cpuset.effective_cpus of cgroup /node (1)"}},
			want:   "cpu=1000m",
			notes:  []string{"limitFrom cpuset.effective_cpus of cgroup /node (1)", "allocatable 1000"}},
		{name: "no kubelet configuration: no eviction threshold", machine: host, limits: container,
			want:  fmt.Sprintf("cpu=1000m,memory=%d,pid=%d", host.Memory-3*gi, 32768-4096),
			notes: []string{`resource memory`, `limitFrom memory.limit_in_bytes of cgroup /node`, `capacityFrom MemTotal of /proc/meminfo`, "Adding --system-reserved"}},
		{name: "--config: the default eviction threshold, 100Mi", machine: host, limits: container, args: []string{"--config=" + bare},
			want: fmt.Sprintf("cpu=1000m,memory=%d,pid=%d", host.Memory-3*gi, 32768-4096), evict: 100 << 20,
			notes: []string{"evictionHard 104857600 (memory.available<100Mi from the kubelet's default evictionHard"}},
		{name: "a drop-in's threshold without a --config file", machine: host, limits: container, args: []string{"--config-dir=" + filepath.Join(dir, "drop-ins")},
			want: fmt.Sprintf("cpu=1000m,memory=%d,pid=%d", host.Memory-3*gi, 32768-4096), evict: 200 << 20,
			notes: []string{"evictionHard 209715200 (memory.available<200Mi from evictionHard of the kubelet's configuration"}},
		{name: "a drop-in's threshold", machine: host, limits: container, args: []string{"--config=" + bare, "--config-dir=" + filepath.Join(dir, "drop-ins")},
			want: fmt.Sprintf("cpu=1000m,memory=%d,pid=%d", host.Memory-3*gi, 32768-4096), evict: 200 << 20,
			notes: []string{"memory.available<200Mi from evictionHard of the kubelet's configuration"}},
		{name: "the operator's smaller reservations: replaced, other resources kept, kubeReserved and a percentage counted", machine: host, limits: container,
			args:  []string{"--config=" + withReserved},
			want:  fmt.Sprintf("cpu=1000m,ephemeral-storage=1Gi,memory=%d,pid=%d", host.Memory-3*gi, 32768-4096),
			evict: int64(float64(host.Memory) * float64(float32(5.0)/100)),
			notes: []string{"replaces memory=1Gi from systemReserved of the kubelet's configuration", "kubeReserved 268435456 (memory=256Mi from kubeReserved"}},
		{name: "the operator's larger reservation holds", machine: host, limits: cgroups.Limits{Memory: container.Memory},
			args: []string{"--config=" + greedy}, evict: 100 << 20,
			notes: []string{"The kubelet's own system-reserved is the stricter: kept", "systemReservedFrom memory=21Gi from systemReserved"}},
		{name: "the operator's larger reservation holds beside nodeinit's cpu", machine: host, limits: container,
			args: []string{"--config=" + greedy}, evict: 100 << 20,
			want: fmt.Sprintf("cpu=1000m,memory=21Gi,pid=%d", 32768-4096)},
		{name: "the executor's --system-reserved flags replace the file's and accumulate", machine: host, limits: container,
			args: []string{"--config=" + withReserved, "--system-reserved=ephemeral-storage=2Gi", "--system-reserved", "cpu=1500m", "--eviction-hard=memory.available<1Gi,nodefs.available<1%"},
			want: fmt.Sprintf("cpu=1500m,ephemeral-storage=2Gi,memory=%d,pid=%d", host.Memory-3*gi, 32768-4096), evict: gi,
			notes: []string{"systemReservedFrom cpu=1500m from the executor's --system-reserved", "memory.available<1Gi from the executor's --eviction-hard"}},
		{name: "--experimental-allocatable-ignore-eviction", machine: host, limits: container,
			args: []string{"--config=" + bare, "--experimental-allocatable-ignore-eviction"},
			want: fmt.Sprintf("cpu=1000m,memory=%d,pid=%d", host.Memory-3*gi, 32768-4096)},
		{name: "lxcfs: the kubelet sees the limit already", machine: Machine{Memory: 3 * gi, CPUs: 1, Pids: 32768},
			limits: container, args: []string{"--config=" + bare},
			want:  "pid=28672",
			notes: []string{"no smaller than the kubelet's capacity", "resource memory", "resource cpu"}},
		{name: "a limit below kubeReserved and the eviction threshold", machine: host,
			limits: cgroups.Limits{Memory: cgroups.Limit{Value: 200 << 20, From: "memory.max of cgroup /tiny"}},
			args:   []string{"--config=" + withReserved}, evict: int64(float64(host.Memory) * float64(float32(5.0)/100)),
			want:     fmt.Sprintf("ephemeral-storage=1Gi,memory=%d", host.Memory-(256<<20)-int64(float64(host.Memory)*float64(float32(5.0)/100))),
			warnings: []string{"the node gets no allocatable of this resource"}},
		// The kubelet v1.34 defaults evictionHard only for a --config file
		// that leaves it unset: its flags alone give it none, and an empty
		// map in the file means none.
		{name: "an explicitly empty evictionHard in the --config file: no eviction threshold", machine: host, limits: container,
			args:  []string{"--config=" + noEviction},
			want:  fmt.Sprintf("cpu=1000m,memory=%d,pid=%d", host.Memory-3*gi, 32768-4096),
			notes: []string{`evictionHard none`, "allocatable 3221225472"}},
		{name: "mergeDefaultEvictionSettings: the default memory threshold beside the file's", machine: host, limits: container,
			args: []string{"--config=" + mergedEviction}, evict: 100 << 20,
			want:  fmt.Sprintf("cpu=1000m,memory=%d,pid=%d", host.Memory-3*gi, 32768-4096),
			notes: []string{"memory.available<100Mi from evictionHard of the kubelet's configuration"}},
		{name: "a limit just above kubeReserved, flags only: no threshold, the reservation within capacity", machine: host, limits: justAbove,
			args: []string{"--kube-reserved=memory=256Mi"},
			want: fmt.Sprintf("memory=%d", host.Memory-300<<20), notes: []string{"evictionHard none", "allocatable 46137344"}},
		{name: "a limit just above kubeReserved with the default threshold: reserved only up to capacity", machine: host, limits: justAbove,
			args: []string{"--config=" + bare, "--kube-reserved=memory=256Mi"}, evict: 100 << 20,
			want:     fmt.Sprintf("memory=%d", host.Memory-356<<20),
			warnings: []string{"below the kubelet's kubeReserved and hard eviction threshold"}},
		{name: "reserved CPUs replace the cpu reservation", machine: host, limits: container, args: []string{"--config=" + pinned},
			want: fmt.Sprintf("memory=%d,pid=%d", host.Memory-3*gi, 32768-4096), evict: 100 << 20,
			warnings: []string{"reservedCPUs 0 from reservedSystemCPUs"},
			notes:    []string{"enforceNodeAllocatable has no pods"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kc, err := ReadKubeletConfig(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			s := sizeNode(tt.machine, tt.limits, "/node", tt.args, kc)
			if s.SystemReserved != tt.want {
				t.Errorf("--system-reserved=%q, want %q", s.SystemReserved, tt.want)
			}
			var infos, warnings []string
			for _, n := range s.Notes {
				line := n.Msg
				for i := 0; i+1 < len(n.KV); i += 2 {
					line += fmt.Sprintf(" %v %v", n.KV[i], n.KV[i+1])
				}
				if n.Warning {
					warnings = append(warnings, line)
				} else {
					infos = append(infos, line)
				}
			}
			for _, w := range tt.notes {
				if !strings.Contains(strings.Join(infos, "\n"), w) {
					t.Errorf("no note says %q:\n%s", w, strings.Join(infos, "\n"))
				}
			}
			for _, w := range tt.warnings {
				if !strings.Contains(strings.Join(warnings, "\n"), w) {
					t.Errorf("no warning says %q:\n%s", w, strings.Join(warnings, "\n"))
				}
			}
			if len(tt.warnings) == 0 && len(warnings) > 0 {
				t.Errorf("warnings: %s", strings.Join(warnings, "\n"))
			}
			// Whatever nodeinit passes, the kubelet's allocatable fits the
			// container, and so does its kubepods cgroup, except where
			// the kubelet's own reservations already make it 0.
			system := parseReservation(s.SystemReserved)
			if s.SystemReserved == "" {
				system = kubeletReservation(tt.args, "system-reserved", kc.SystemReserved, kc, "", "=").values
			}
			kube := kubeletReservation(tt.args, "kube-reserved", kc.KubeReserved, kc, "", "=").values
			for _, r := range []struct {
				name  string
				limit cgroups.Limit
			}{{"memory", tt.limits.Memory}, {"cpu", tt.limits.CPU}, {"pid", tt.limits.Pids}} {
				if !r.limit.Found() || r.name == "cpu" && kc.ReservedSystemCPUs != "" {
					continue
				}
				node, kubepods := allocatable(t, tt.machine, system, kube, tt.evict, r.name)
				// The kubelet refuses to start when its reservations
				// exceed its capacity (validateNodeAllocatable).
				if kubepods < 0 || r.name == "memory" && kubepods-tt.evict < 0 {
					t.Errorf("%s: the reservations exceed the kubelet's capacity: it would refuse to start", r.name)
				}
				if node > r.limit.Value {
					t.Errorf("%s: the Node's allocatable %d exceeds the container's limit %d", r.name, node, r.limit.Value)
				}
				if kubepods > r.limit.Value && node > 0 {
					t.Errorf("%s: the kubepods cgroup's limit %d exceeds the container's %d", r.name, kubepods, r.limit.Value)
				}
				// The note's predicted allocatable is the kubelet's.
				for _, n := range s.Notes {
					if len(n.KV) > 1 && n.KV[1] == r.name {
						for i := 0; i+1 < len(n.KV); i += 2 {
							if n.KV[i] == "allocatable" && n.KV[i+1] != node {
								t.Errorf("%s: the log predicts allocatable %v, the kubelet computes %d", r.name, n.KV[i+1], node)
							}
						}
					}
				}
			}
		})
	}
}

func TestExecutorGetsTheSystemReservation(t *testing.T) {
	c := cfg(func(*config.Config) {})
	ct := Container{Sizing: Sizing{SystemReserved: "cpu=1000m,memory=1"}}
	got := Executor(c, nil, ct, KubeletConfig{}).Args
	if want := "--system-reserved=cpu=1000m,memory=1"; len(got) == 0 || got[len(got)-1] != want {
		t.Errorf("executor args %q, want %s last", got, want)
	}
	c.Executor.SizeNodeToContainer = false
	for _, a := range Executor(c, nil, ct, KubeletConfig{}).Args {
		if strings.HasPrefix(a, "--system-reserved") {
			t.Errorf("--size-node-to-container=false, and the executor still gets %s", a)
		}
	}
}
