// Package logind is nodeinit's stand-in for systemd-logind: the part of
// logind's org.freedesktop.login1 API that the kubelet's Graceful Node
// Shutdown uses, and the part of systemd's org.freedesktop.systemd1 that
// reloads logind, served as a service (package service) of nodeinit's own
// bus (package bus), so that a kubelet in a container (where no logind
// runs) drains its pods before nodeinit stops it. It owns logind's names
// (BusName, ObjectPath, ManagerIface: package hostlogind calls the host's
// logind by them), the manager's methods and properties (logind.go), the
// delay inhibitors (inhibit_linux.go), systemd's KillUnit of logind
// (systemd1.go) and the reading of logind.conf (logindconf.go); the bus
// owns everything about connections and messages.
//
// # The sequence
//
// nodeinit creates the bus with logind (bus.Listen(path, opts, New(...)))
// before it starts the executor and gives the executor
// DBUS_SYSTEM_BUS_ADDRESS=bus.Address(). The kubelet (v1.34,
// pkg/kubelet/nodeshutdown) then, over godbus's shared SystemBus
// connection:
//
//  1. authenticates and calls org.freedesktop.DBus.Hello (the bus's);
//  2. reads the property org.freedesktop.login1.Manager.InhibitDelayMaxUSec
//     on /org/freedesktop/login1, answered from Options.InhibitDelayMax. If it
//     is shorter than the kubelet's shutdownGracePeriod (the sum of its
//     grace periods by pod priority), the kubelet writes
//     /etc/systemd/logind.conf.d/99-kubelet.conf (InhibitDelayMaxSec=N) and
//     asks org.freedesktop.systemd1 to KillUnit systemd-logind.service with
//     SIGHUP, then reads the property again: lower than it asked for, it
//     gives the feature up for good. logind answers that KillUnit as
//     systemd and logind together: it re-reads InhibitDelayMaxSec from
//     logind.conf and its drop-ins under Options.ConfigRoot, in systemd's
//     order (the first logind.conf of /etc/systemd, /run/systemd,
//     /usr/local/lib/systemd, /usr/lib/systemd; then every
//     logind.conf.d/*.conf of those, sorted by file name, /etc's hiding
//     the same name further down, a link to /dev/null masking it), starting
//     from Options.InhibitDelayMax as logind starts from its defaults, and
//     replies only then, so that the kubelet's next read sees the new
//     delay. InhibitDelayMax follows it. Each file is read as a regular
//     file of at most 64 KiB, a link followed as systemd follows it
//     (internal/linux.ReadRegularFile): a FIFO, a device (a link to
//     /dev/zero) or a larger file is skipped and logged, never waited on.
//     Another unit is NoSuchUnit, another signal to logind NotSupported;
//     where a system bus is behind nodeinit's, every other call to systemd
//     goes there (org.freedesktop.systemd1 is a Shared name);
//  3. calls Inhibit("shutdown", "kubelet", why, "delay") and keeps the unix fd
//     it gets: the write end of a pipe whose read end logind watches;
//  4. adds the match rule for PrepareForShutdown and waits.
//
// On TERM, nodeinit calls PrepareForShutdown: every connection whose match
// rules want it gets PrepareForShutdown(true); the kubelet marks its Node,
// ends its pods by priority within their grace periods and closes its fd;
// the channel PrepareForShutdown returned is closed when the last delay lock
// is gone, and nodeinit goes on to TERM the executor. nodeinit bounds that
// wait with the delay in force when the drain begins (InhibitDelayMax), as
// logind does; a reload sets at most MaxInhibitDelay.
//
// The kubelet takes its first lock when it starts; if the bus is not there
// then, it never tries again (it reconnects every second only after a
// connection that worked has ended). So the bus must listen before the
// executor starts.
//
// # What logind answers
//
// On /org/freedesktop/login1: Properties.Get, GetAll and Set (read-only)
// of the manager's one property, InhibitDelayMaxUSec; Inhibit; and
// ListInhibitors as logind answers it: every lock held, by anyone who
// asks, as (what, who, why, mode, uid, pid), who and why as clipped when
// the lock was taken (systemd-inhibit --list shows them). The bus answers
// Introspectable and Peer for logind's objects, from / down to
// /org/freedesktop/login1. Everything else is the D-Bus error logind would
// give (UnknownMethod, UnknownObject, InvalidArgs, NotSupported for lock
// types nodeinit does not offer), logged by the bus.
//
// # Delay locks
//
// Nobody on the node can take the kubelet's lock: 4 per process, 64 in
// all, those of the executor process itself not counted in the 64. From
// the first PrepareForShutdown on, Inhibit is OperationInProgress, until
// CancelShutdown: the host's shutdown, which nodeinit drains the node for
// (package hostlogind), can be cancelled, and then the kubelet gets
// PrepareForShutdown(false), takes a new lock and admits pods again, and
// the next PrepareForShutdown is a new shutdown with a new channel.
//
// An inhibitor's pipe is made with O_CLOEXEC and its write end is closed in
// nodeinit as soon as it is sent, so the lock's lifetime is the client's
// alone. Its read end waits in Go's poller for the hang-up alone, as
// logind's does: nothing is ever read from it, so a client that writes into
// its lock fills a one-page pipe and then blocks, at no cost to nodeinit
// (measured: 2 ms of CPU in 3 s of a writer, where reading what it wrote
// took 2.5 s). Its watcher is one of the bus's goroutines, and a panic in
// it releases that lock. The bus's Close releases every lock.
//
// PrepareForShutdown, CancelShutdown, InhibitDelayMax and Status return
// at once.
package logind
