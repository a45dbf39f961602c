package node

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nodeinit/nodeinit/internal/cmdline"
	"sigs.k8s.io/yaml"
)

// KubeletConfig is the part of the kubelet's own configuration that nodeinit
// reads: its --config file (a KubeletConfiguration) with the drop-ins of its
// --config-dir merged over it, as the kubelet merges them. Only the fields
// nodeinit acts on are decoded; the kubelet validates the rest.
type KubeletConfig struct {
	// File is the --config file, empty when the executor has none; Files
	// lists it and every drop-in read, in the order they were merged.
	File  string   `json:"-"`
	Files []string `json:"-"`

	CgroupRoot string `json:"cgroupRoot,omitempty"`
	// CgroupDriverSetting is the configuration's cgroupDriver,
	// cgroupDriverFlag the executor's --cgroup-driver: both are read
	// through CgroupDriver.
	CgroupDriverSetting string `json:"cgroupDriver,omitempty"`
	cgroupDriverFlag    string
	Address             string `json:"address,omitempty"`
	// ContainerRuntimeEndpoint is the runtime the kubelet uses (its
	// --container-runtime-endpoint flag wins over it).
	ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint,omitempty"`
	// FailSwapOn, FeatureGates and ResolvConf are what the checks of a
	// restricted container (package restrict) must not override; nil or
	// absent when the files leave them to the kubelet's defaults.
	FailSwapOn *bool `json:"failSwapOn,omitempty"`
	// FailCgroupV1 is what CgroupV1Refusal reads: nil when the files
	// leave it to the kubelet's default, which depends on its release.
	FailCgroupV1 *bool           `json:"failCgroupV1,omitempty"`
	FeatureGates map[string]bool `json:"featureGates,omitempty"`
	ResolvConf   *string         `json:"resolvConf,omitempty"`
	// ShutdownGracePeriod and ShutdownGracePeriodCriticalPods, or
	// ShutdownGracePeriodByPodPriority, set up graceful node shutdown.
	ShutdownGracePeriod              kubeletDuration         `json:"shutdownGracePeriod,omitempty"`
	ShutdownGracePeriodCriticalPods  kubeletDuration         `json:"shutdownGracePeriodCriticalPods,omitempty"`
	ShutdownGracePeriodByPodPriority []ShutdownGracePeriodAt `json:"shutdownGracePeriodByPodPriority,omitempty"`

	// What the kubelet subtracts from its capacity for the Node's
	// allocatable (see SizeToContainer). EvictionHard is the kubelet's
	// default when the --config file sets none.
	SystemReserved               map[string]string `json:"systemReserved,omitempty"`
	KubeReserved                 map[string]string `json:"kubeReserved,omitempty"`
	EvictionHard                 map[string]string `json:"evictionHard,omitempty"`
	MergeDefaultEvictionSettings bool              `json:"mergeDefaultEvictionSettings,omitempty"`
	ReservedSystemCPUs           string            `json:"reservedSystemCPUs,omitempty"`
	EnforceNodeAllocatable       []string          `json:"enforceNodeAllocatable,omitempty"`
	// evictionDefaulted says EvictionHard holds the kubelet's defaults.
	evictionDefaulted bool
}

// defaultEvictionHard is the kubelet's hard eviction threshold when its
// --config file leaves evictionHard unset (v1.34,
// pkg/kubelet/eviction/defaults_linux.go). The kubelet applies it in
// cmd/kubelet/app/server.go loadConfigFile alone: the defaults of its
// flag-only configuration (options.NewKubeletConfiguration, the v1beta1
// SetDefaults_KubeletConfiguration) and of its --config-dir drop-ins set
// no evictionHard, so a kubelet without a --config file has no hard
// eviction threshold; an empty evictionHard ({}) in the file means none
// too, unless mergeDefaultEvictionSettings adds the defaults to it.
var defaultEvictionHard = map[string]string{
	"memory.available":   "100Mi",
	"nodefs.available":   "10%",
	"nodefs.inodesFree":  "5%",
	"imagefs.available":  "15%",
	"imagefs.inodesFree": "5%",
}

// ShutdownGracePeriodAt is one entry of shutdownGracePeriodByPodPriority.
type ShutdownGracePeriodAt struct {
	Priority                   int32 `json:"priority"`
	ShutdownGracePeriodSeconds int64 `json:"shutdownGracePeriodSeconds"`
}

// kubeletDuration is a duration as the kubelet writes it ("30s", "1m").
type kubeletDuration struct{ time.Duration }

func (d *kubeletDuration) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "null" || s == "" {
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("not a duration: %s", b)
	}
	d.Duration = v
	return nil
}

// ShutdownDelay is how long the kubelet's graceful node shutdown asks the
// system to wait for it: the sum of the grace periods by pod priority, which
// the kubelet derives from shutdownGracePeriod when they are not given. Zero
// means the kubelet does not shut the node down gracefully.
func (k KubeletConfig) ShutdownDelay() time.Duration {
	if len(k.ShutdownGracePeriodByPodPriority) == 0 {
		return k.ShutdownGracePeriod.Duration
	}
	var sum int64
	for _, p := range k.ShutdownGracePeriodByPodPriority {
		sum += p.ShutdownGracePeriodSeconds
	}
	return time.Duration(sum) * time.Second
}

// CgroupDriver is the kubelet's own cgroup driver setting: its
// --cgroup-driver flag, which the kubelet takes over its configuration,
// else cgroupDriver from the configuration; "" when neither sets it (the
// kubelet's default is cgroupfs). The driver it runs with is the one its
// container runtime reports over the CRI where the runtime does and the
// kubelet asks (TakesRuntimeCgroupDriver): cgroups.Result's
// KubeletCgroupDriver is that one.
func (k KubeletConfig) CgroupDriver() string {
	if k.cgroupDriverFlag != "" {
		return k.cgroupDriverFlag
	}
	return k.CgroupDriverSetting
}

// maxKubeletFile bounds what is read of one kubelet configuration file.
const maxKubeletFile = 1 << 20

// ReadKubeletConfig reads the kubelet configuration that args (the
// executor's arguments) point at: the --config file, then every *.conf
// below --config-dir, walked as the kubelet walks it (recursively, in
// lexical order), each merged over the ones before. Without either flag it
// returns the zero KubeletConfig and no error: the executor may not be a
// kubelet at all. A file named but unreadable or not YAML is an error that
// names it.
func ReadKubeletConfig(args []string) (KubeletConfig, error) {
	var k KubeletConfig
	k.cgroupDriverFlag, _ = cmdline.Value(args, "cgroup-driver")
	file, _ := cmdline.Value(args, "config")
	dir, _ := cmdline.Value(args, "config-dir")
	var files []string
	if file != "" {
		k.File = file
		files = append(files, file)
	}
	if dir != "" {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && filepath.Ext(path) == ".conf" {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return k, fmt.Errorf("kubelet --config-dir %s: %w", dir, err)
		}
	}
	for _, f := range files {
		if err := mergeKubeletFile(&k, f); err != nil {
			return k, err
		}
		if f == file && len(k.Files) == 0 {
			// The kubelet defaults the --config file's evictionHard
			// before it merges the drop-ins.
			unset := k.EvictionHard == nil
			k.evictionDefaulted = unset
			if unset {
				k.EvictionHard = map[string]string{}
			}
			for key, v := range defaultEvictionHard {
				if _, set := k.EvictionHard[key]; unset || k.MergeDefaultEvictionSettings && !set {
					k.EvictionHard[key] = v
				}
			}
		}
		k.Files = append(k.Files, f)
	}
	return k, nil
}

func mergeKubeletFile(k *KubeletConfig, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("read the kubelet's configuration: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKubeletFile+1))
	if err != nil {
		return fmt.Errorf("read the kubelet's configuration %s: %w", file, err)
	}
	if len(data) > maxKubeletFile {
		return fmt.Errorf("read the kubelet's configuration %s: larger than %d bytes", file, maxKubeletFile)
	}
	// Unmarshal over what earlier files set: a field a drop-in leaves out
	// keeps its value, as in the kubelet.
	if err := yaml.Unmarshal(data, k); err != nil {
		return fmt.Errorf("read the kubelet's configuration %s: %w", file, err)
	}
	var sets struct {
		EvictionHard map[string]string `json:"evictionHard"`
	}
	if yaml.Unmarshal(data, &sets) == nil && sets.EvictionHard != nil {
		k.evictionDefaulted = false
	}
	return nil
}
