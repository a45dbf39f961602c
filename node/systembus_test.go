package node

import (
	"errors"
	"strings"
	"testing"
)

func TestAKubeletOnSystemdCgroupsNeedsASystemBus(t *testing.T) {
	noBus := errors.New("DBUS_SYSTEM_BUS_ADDRESS is unset and there is no socket at /run/dbus/system_bus_socket")
	systemd := KubeletConfig{CgroupDriverSetting: "systemd"}
	if err := RequireSystemBus(systemd.CgroupDriver(), noBus, "/run/dbus/system_bus_socket"); err == nil || !strings.Contains(err.Error(), "cgroup driver is systemd") ||
		!strings.Contains(err.Error(), noBus.Error()) || strings.Contains(err.Error(), "\n") {
		t.Errorf("systemd without a bus: %v", err)
	}
	for _, tc := range []struct {
		kubelet KubeletConfig
		noBus   error
	}{
		{KubeletConfig{CgroupDriverSetting: "cgroupfs"}, noBus},
		{KubeletConfig{}, noBus},
		{systemd, nil},
		// The flag wins over the configuration, as in the kubelet.
		{KubeletConfig{CgroupDriverSetting: "systemd", cgroupDriverFlag: "cgroupfs"}, noBus},
	} {
		if err := RequireSystemBus(tc.kubelet.CgroupDriver(), tc.noBus, "/run/dbus/system_bus_socket"); err != nil {
			t.Errorf("%q, %v: %v", tc.kubelet.CgroupDriver(), tc.noBus, err)
		}
	}
}
