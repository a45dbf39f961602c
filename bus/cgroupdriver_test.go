package bus

import (
	"os"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/nodeinit/nodeinit/bus/service"
)

// The kubelet's systemd cgroup driver (runc's libcontainer, now
// opencontainers/cgroups, on go-systemd's dbus package) reaches systemd
// through this bus's pass-through. These tests make its calls, message for
// message, against a systemd stand-in on a real dbus-daemon.

// The types go-systemd sends and receives.
type (
	sdProperty struct {
		Name  string
		Value dbus.Variant
	}
	sdPropertyCollection struct {
		Name       string
		Properties []sdProperty
	}
	sdUnitStatus struct {
		Name, Description, LoadState, ActiveState, SubState, Followed string
		Path                                                          dbus.ObjectPath
		JobID                                                         uint32
		JobType                                                       string
		JobPath                                                       dbus.ObjectPath
	}
	sdDeviceAllow struct{ Path, Perm string }
)

const (
	systemdUnitPrefix = "/org/freedesktop/systemd1/unit/"
	kubepodsSlice     = "kubepods.slice"
	kubepodsPath      = dbus.ObjectPath(systemdUnitPrefix + "kubepods_2eslice") // go-systemd's PathBusEscape
)

// fakeSystemd is systemd's manager as far as the cgroup driver uses it:
// it records what it is sent and answers with the types systemd answers
// with; a job ends at once with JobRemoved(..., "done").
type fakeSystemd struct {
	conn *dbus.Conn

	mu         sync.Mutex
	jobs       uint32
	subscribed int
	started    map[string][]sdProperty
	set        map[string][]sdProperty
	attached   []uint32
	reset      []string
	killed     []string
}

func (s *fakeSystemd) job(unit, signal string) dbus.ObjectPath {
	s.mu.Lock()
	s.jobs++
	id := s.jobs
	s.mu.Unlock()
	job := dbus.ObjectPath("/org/freedesktop/systemd1/job/" + strconv.Itoa(int(id)))
	go func() {
		// After the reply, as systemd's job ends after it.
		time.Sleep(10 * time.Millisecond)
		if signal != "" {
			_ = s.conn.Emit(systemdPath, systemdIface+"."+signal, unit, kubepodsPath)
		}
		_ = s.conn.Emit(systemdPath, systemdIface+".JobRemoved", id, job, unit, "done")
	}()
	return job
}

func (s *fakeSystemd) Subscribe() *dbus.Error {
	s.mu.Lock()
	s.subscribed++
	s.mu.Unlock()
	return nil
}

func (s *fakeSystemd) StartTransientUnit(name, mode string, props []sdProperty, aux []sdPropertyCollection) (dbus.ObjectPath, *dbus.Error) {
	s.mu.Lock()
	s.started[name] = props
	s.mu.Unlock()
	return s.job(name, "UnitNew"), nil
}

func (s *fakeSystemd) StopUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	return s.job(name, ""), nil
}

func (s *fakeSystemd) SetUnitProperties(name string, runtime bool, props []sdProperty) *dbus.Error {
	s.mu.Lock()
	s.set[name] = props
	s.mu.Unlock()
	return nil
}

func (s *fakeSystemd) AttachProcessesToUnit(unit, subcgroup string, pids []uint32) *dbus.Error {
	s.mu.Lock()
	s.attached = append(s.attached, pids...)
	s.mu.Unlock()
	return nil
}

func (s *fakeSystemd) ResetFailedUnit(name string) *dbus.Error {
	s.mu.Lock()
	s.reset = append(s.reset, name)
	s.mu.Unlock()
	return nil
}

func (s *fakeSystemd) KillUnit(name, whom string, signal int32) *dbus.Error {
	s.mu.Lock()
	s.killed = append(s.killed, name)
	s.mu.Unlock()
	return nil
}

func (s *fakeSystemd) ListUnits() ([]sdUnitStatus, *dbus.Error) {
	return []sdUnitStatus{
		{kubepodsSlice, "libcontainer container kubepods.slice", "loaded", "active", "active", "", kubepodsPath, 0, "", "/"},
		{"containerd.service", "containerd", "loaded", "active", "running", "", systemdUnitPrefix + "containerd_2eservice", 0, "", "/"},
	}, nil
}

// fakeProperties is org.freedesktop.DBus.Properties of the manager and of
// the slice.
type fakeProperties struct{ unit bool }

func (p fakeProperties) Get(iface, name string) (dbus.Variant, *dbus.Error) {
	switch {
	case !p.unit && iface == systemdIface && name == "Version":
		return dbus.MakeVariant("252.39-1~deb12u1"), nil
	case p.unit && name == "DevicePolicy":
		return dbus.MakeVariant("strict"), nil
	case p.unit && name == "DeviceAllow":
		return dbus.MakeVariant([]sdDeviceAllow{{"/dev/null", "rwm"}, {"char-pts", "rwm"}}), nil
	case p.unit && name == "MemoryMax":
		return dbus.MakeVariant(uint64(1 << 30)), nil
	}
	return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{"Unknown property " + name})
}

// serveFakeSystemd owns org.freedesktop.systemd1 on the system bus at
// address, on a connection of its own.
func serveFakeSystemd(t *testing.T, address string) *fakeSystemd {
	t.Helper()
	conn, err := dbus.Connect(address)
	must(t, err)
	t.Cleanup(func() { conn.Close() })
	s := &fakeSystemd{conn: conn, started: map[string][]sdProperty{}, set: map[string][]sdProperty{}}
	must(t, conn.Export(s, systemdPath, systemdIface))
	must(t, conn.Export(fakeProperties{}, systemdPath, service.PropertiesIface))
	must(t, conn.Export(fakeProperties{unit: true}, kubepodsPath, service.PropertiesIface))
	if reply, err := conn.RequestName(systemdName, dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("RequestName(%s): %v, %v", systemdName, reply, err)
	}
	return s
}

// goSystemd is go-systemd's dbus.Conn as the cgroup driver opens it
// (NewWithContext): two private connections to the system bus, each
// authenticated with EXTERNAL and the uid alone, then Hello; one for calls,
// one for signals, with go-systemd's rules (a space after each comma).
type goSystemd struct {
	t                *testing.T
	sysconn, sigconn *dbus.Conn
	signals          chan *dbus.Signal
	unitNew          []any // the body of the last UnitNew
}

func dialGoSystemd(t *testing.T, address string) *goSystemd {
	t.Helper()
	dial := func() *dbus.Conn {
		conn, err := dbus.Dial(address)
		must(t, err)
		t.Cleanup(func() { conn.Close() })
		must(t, conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}))
		must(t, conn.Hello())
		return conn
	}
	g := &goSystemd{t: t, sysconn: dial(), sigconn: dial(), signals: make(chan *dbus.Signal, 100)}
	g.sigconn.Signal(g.signals)
	// go-systemd ignores the answer to its AddMatch calls; a bus that
	// refused them would leave it waiting for JobRemoved in vain.
	must(t, g.sigconn.BusObject().Call(service.BusName+".AddMatch", 0, "type='signal', interface='org.freedesktop.systemd1.Manager', member='JobRemoved'").Err)
	return g
}

func (g *goSystemd) sysobj() dbus.BusObject { return g.sysconn.Object(systemdName, systemdPath) }

// subscribe is go-systemd's Subscribe.
func (g *goSystemd) subscribe() {
	g.t.Helper()
	must(g.t, g.sigconn.BusObject().Call(service.BusName+".AddMatch", 0, "type='signal',interface='org.freedesktop.systemd1.Manager',member='UnitNew'").Err)
	must(g.t, g.sigconn.BusObject().Call(service.BusName+".AddMatch", 0, "type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged'").Err)
	must(g.t, g.sigconn.Object(systemdName, systemdPath).Call(systemdIface+".Subscribe", 0).Err)
}

// startJob is go-systemd's startJob and the cgroup driver's wait for
// JobRemoved: the job's result.
func (g *goSystemd) startJob(method string, args ...any) string {
	g.t.Helper()
	var job dbus.ObjectPath
	if err := g.sysobj().Call(systemdIface+"."+method, 0, args...).Store(&job); err != nil {
		g.t.Fatalf("%s: %v", method, err)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case sig := <-g.signals:
			if sig.Name == systemdIface+".UnitNew" {
				g.unitNew = sig.Body
			}
			if sig.Name != systemdIface+".JobRemoved" || len(sig.Body) != 4 || sig.Body[1] != job {
				continue
			}
			result, _ := sig.Body[3].(string)
			return result
		case <-deadline:
			g.t.Fatalf("%s: no JobRemoved for %s within 10s", method, job)
		}
	}
}

// The cgroup driver's calls, in the order the kubelet makes them for its
// kubepods slice (opencontainers/cgroups systemd: Apply, Set, the device
// rules, Destroy), pass through to systemd and back with every type
// intact; what systemd got is what the driver sent.
func TestTheSystemdCgroupDriversCallsPassThrough(t *testing.T) {
	address, _ := systemBus(t)
	systemd := serveFakeSystemd(t, address)
	b := listen(t, testOptions{Upstream: address})
	g := dialGoSystemd(t, b.Address())
	g.subscribe()

	// systemdVersion: GetManagerProperty("Version").
	v, err := g.sysobj().GetProperty(systemdIface + ".Version")
	if err != nil || v.Value() != "252.39-1~deb12u1" {
		t.Errorf("Version = %v, %v", v, err)
	}

	props := []sdProperty{
		{"Description", dbus.MakeVariant("libcontainer container " + kubepodsSlice)},
		{"Wants", dbus.MakeVariant("-.slice")},
		{"MemoryAccounting", dbus.MakeVariant(true)},
		{"CPUAccounting", dbus.MakeVariant(true)},
		{"IOAccounting", dbus.MakeVariant(true)},
		{"TasksAccounting", dbus.MakeVariant(true)},
		{"DefaultDependencies", dbus.MakeVariant(false)},
		{"Delegate", dbus.MakeVariant(true)},
		{"PIDs", dbus.MakeVariant([]uint32{uint32(os.Getpid())})},
		{"DevicePolicy", dbus.MakeVariant("strict")},
		{"DeviceAllow", dbus.MakeVariant([]sdDeviceAllow{{"/dev/null", "rwm"}, {"char-pts", "rwm"}})},
		{"MemoryMax", dbus.MakeVariant(uint64(1 << 30))},
		{"CPUWeight", dbus.MakeVariant(uint64(100))},
		{"TasksMax", dbus.MakeVariant(uint64(4096))},
		{"AllowedCPUs", dbus.MakeVariant([]byte{0x3})},
	}
	if result := g.startJob("StartTransientUnit", kubepodsSlice, "replace", props, []sdPropertyCollection{}); result != "done" {
		t.Errorf("StartTransientUnit's job: %q", result)
	}
	systemd.mu.Lock()
	got := systemd.started[kubepodsSlice]
	systemd.mu.Unlock()
	if !sameProperties(got, props) {
		t.Errorf("systemd got the properties\n%v\nthe driver sent\n%v", got, props)
	}

	// The device rules in force: GetUnitTypeProperty of the slice.
	var allow dbus.Variant
	must(t, g.sysconn.Object(systemdName, kubepodsPath).Call(service.PropertiesIface+".Get", 0, "org.freedesktop.systemd1.Slice", "DeviceAllow").Store(&allow))
	var rules []sdDeviceAllow
	if err := dbus.Store([]any{allow.Value()}, &rules); err != nil || allow.Signature().String() != "a(ss)" ||
		!slices.Equal(rules, []sdDeviceAllow{{"/dev/null", "rwm"}, {"char-pts", "rwm"}}) {
		t.Errorf("DeviceAllow = %v (%s), %v", allow, allow.Signature(), err)
	}

	// Set: SetUnitProperties(name, runtime, properties).
	set := []sdProperty{{"MemoryMax", dbus.MakeVariant(uint64(2 << 30))}, {"DeviceAllow", dbus.MakeVariant([]sdDeviceAllow{})}}
	must(t, g.sysobj().Call(systemdIface+".SetUnitProperties", 0, kubepodsSlice, true, set).Err)
	systemd.mu.Lock()
	gotSet := systemd.set[kubepodsSlice]
	systemd.mu.Unlock()
	if !sameProperties(gotSet, set) {
		t.Errorf("SetUnitProperties: systemd got %v, the driver sent %v", gotSet, set)
	}

	must(t, g.sysobj().Call(systemdIface+".AttachProcessesToUnit", 0, kubepodsSlice, "/", []uint32{uint32(os.Getpid())}).Err)

	var units []sdUnitStatus
	if err := g.sysobj().Call(systemdIface+".ListUnits", 0).Store(&units); err != nil || len(units) != 2 ||
		units[0].Name != kubepodsSlice || units[0].Path != kubepodsPath || units[1].SubState != "running" {
		t.Errorf("ListUnits = %+v, %v", units, err)
	}

	// Destroy: StopUnit and its job, then ResetFailedUnit.
	if result := g.startJob("StopUnit", kubepodsSlice, "replace"); result != "done" {
		t.Errorf("StopUnit's job: %q", result)
	}
	must(t, g.sysobj().Call(systemdIface+".ResetFailedUnit", 0, kubepodsSlice).Err)
	// KillUnit of another unit than logind's is systemd's.
	must(t, g.sysobj().Call(systemdIface+".KillUnit", 0, "containerd.service", "all", int32(1)).Err)

	systemd.mu.Lock()
	defer systemd.mu.Unlock()
	if systemd.subscribed != 1 || !slices.Equal(systemd.attached, []uint32{uint32(os.Getpid())}) ||
		!slices.Equal(systemd.reset, []string{kubepodsSlice}) || !slices.Equal(systemd.killed, []string{"containerd.service"}) {
		t.Errorf("systemd saw subscribed=%d attached=%v reset=%v killed=%v", systemd.subscribed, systemd.attached, systemd.reset, systemd.killed)
	}
	// UnitNew came to the connection that subscribed.
	if len(g.unitNew) != 2 || g.unitNew[0] != kubepodsSlice || g.unitNew[1] != kubepodsPath {
		t.Errorf("UnitNew: %v", g.unitNew)
	}
}

// sameProperties compares properties as systemd decoded them with what
// was sent: same names, same signatures, same values once stored into the
// sent values' types.
func sameProperties(got, sent []sdProperty) bool {
	if len(got) != len(sent) {
		return false
	}
	for i := range sent {
		if got[i].Name != sent[i].Name || got[i].Value.Signature() != sent[i].Value.Signature() {
			return false
		}
		want := sent[i].Value.Value()
		into := reflect.New(reflect.TypeOf(want))
		if err := dbus.Store([]any{got[i].Value.Value()}, into.Interface()); err != nil || !reflect.DeepEqual(into.Elem().Interface(), want) {
			return false
		}
	}
	return true
}
