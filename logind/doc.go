// Package logind owns nodeinit's stand-in for systemd-logind: the part of
// the D-Bus system bus and of logind's org.freedesktop.login1 API that the
// kubelet's Graceful Node Shutdown uses, served on a unix socket of
// nodeinit's own, so that a kubelet in a container (where no logind runs)
// drains its pods before nodeinit stops it.
//
// # The sequence
//
// nodeinit calls Listen before it starts the executor and gives the executor
// DBUS_SYSTEM_BUS_ADDRESS=Address(). The kubelet (v1.34,
// pkg/kubelet/nodeshutdown) then, over godbus's shared SystemBus connection:
//
//  1. authenticates (the NUL byte, AUTH, AUTH EXTERNAL <hex uid>,
//     NEGOTIATE_UNIX_FD, BEGIN) and calls org.freedesktop.DBus.Hello;
//  2. reads the property org.freedesktop.login1.Manager.InhibitDelayMaxUSec
//     on /org/freedesktop/login1, answered from Options.InhibitDelayMax. If it
//     is shorter than the kubelet's shutdownGracePeriod (the sum of its
//     grace periods by pod priority), the kubelet writes
//     /etc/systemd/logind.conf.d/99-kubelet.conf (InhibitDelayMaxSec=N) and
//     asks org.freedesktop.systemd1 to KillUnit systemd-logind.service with
//     SIGHUP, then reads the property again: lower than it asked for, it
//     gives the feature up for good. The bus answers that KillUnit as
//     systemd and logind together: it re-reads InhibitDelayMaxSec from
//     logind.conf and its drop-ins under Options.ConfigRoot, in systemd's
//     order (the first logind.conf of /etc/systemd, /run/systemd,
//     /usr/local/lib/systemd, /usr/lib/systemd; then every
//     logind.conf.d/*.conf of those, sorted by file name, /etc's hiding
//     the same name further down, a link to /dev/null masking it), starting
//     from Options.InhibitDelayMax as logind starts from its defaults, and
//     replies only then, so that the kubelet's next read sees the new
//     delay. InhibitDelayMax follows it.
//     Another unit is NoSuchUnit, another signal to logind NotSupported;
//  3. calls Inhibit("shutdown", "kubelet", why, "delay") and keeps the unix fd
//     it gets: the write end of a pipe whose read end the bus watches;
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
// # Why it is built this way
//
// Only the executor's processes may use the bus: the kernel's SO_PEERCRED
// for each connection goes to Options.Allow before a byte is read, and a
// refused peer is logged and disconnected. The socket is mode 0600.
//
// Messages are encoded and decoded by godbus (github.com/godbus/dbus/v5),
// the library the kubelet's side uses, at v5.2 or later: v5.1's decoder
// allocates whatever length a string or array claims before reading it, so
// a 65-byte message could make PID 1 allocate 4 GiB. Before godbus sees a
// message, the reader also checks its length from the fixed header against
// a limit of 64 KiB. godbus keeps a message's serial to itself, so the
// serial of an outgoing message is written into its fixed header position
// after encoding. The authentication is the specification's server state
// machine with EXTERNAL only, the identity checked against SO_PEERCRED.
//
// The bus is what a real one would be wherever the kubelet can tell: Hello
// answers a unique name and is followed by NameAcquired; AddMatch and
// RemoveMatch keep real match rules; replies carry the sender and the
// caller's unique name as destination. Everything else is answered with the
// D-Bus error a bus or logind would give (UnknownMethod, UnknownObject,
// InvalidArgs, ServiceUnknown, NotSupported for lock types nodeinit does
// not offer) and logged, and nothing a client sends can crash or block
// nodeinit: input that breaks the message format ends that connection, as
// the specification asks.
//
// Other clients than the kubelet ask the bus more first: python-dbus's
// get_object binds its proxy to the unique name GetNameOwner gives and
// introspects, GIO's proxies read GetAll and drop a signal whose sender is
// not the name's unique owner. So logind has a unique name of its own,
// ":1.0" (connections get ":1.1" on), which GetNameOwner gives for
// org.freedesktop.login1 (and org.freedesktop.systemd1), which replies and
// PrepareForShutdown carry as their sender, and which a match rule for
// sender='org.freedesktop.login1' matches, as on a real bus. The bus
// answers GetNameOwner, NameHasOwner, ListNames, ListActivatableNames,
// GetId, StartServiceByName (for its own names), RequestName (refused:
// AccessDenied, as the system bus's policy refuses it, or InvalidArgs),
// ReleaseName, Introspectable.Introspect (the bus; logind's objects from /
// down to /org/freedesktop/login1), Peer.Ping and Peer.GetMachineId (from
// etc/machine-id under Options.ConfigRoot), and Properties.GetAll and Set
// (read-only) on logind's manager.
//
// Nothing blocks nodeinit's PID-1 loop: Listen, Address, PrepareForShutdown,
// Status and Close return at once (Close waits at most a second for the
// bus's goroutines, which end as soon as their descriptors close). Each
// connection has a reader and a writer goroutine; replies and signals wait
// in a queue bounded in messages and bytes, and a peer that lets it fill,
// or does not take a write within 10 s, is dropped. Connections, match
// rules and inhibitors are bounded in number, the handshake in lines,
// line length and time.
//
// Writes go out through the socket's raw descriptor with sendmsg and
// MSG_NOSIGNAL. A plain write to a peer that has gone away makes the kernel
// raise SIGPIPE in the writer; in nodeinit, which catches signals by name
// and forwards them to the executor, that would be a signal of its own
// making, delivered or forwarded whenever SIGPIPE is ever caught. With
// MSG_NOSIGNAL the kernel raises none, and the write fails with EPIPE,
// which ends that one connection. Reads are recvmsg(2): the descriptors a
// client passes are held, at most 32, until the message that carries them
// (its UNIX_FDS header field) is read, and closed once it is answered,
// unless it goes on to the system bus with them.
//
// # The system bus behind it
//
// The executor's system bus is this one, so anything else it runs that
// needs the container's own system bus (a kubelet with cgroupDriver:
// systemd talks to systemd there) would break. With Options.Upstream (see
// UpstreamAddress: DBUS_SYSTEM_BUS_ADDRESS of nodeinit's environment, else
// /run/dbus/system_bus_socket) every message not for logind and not
// answered by the bus itself passes through: each client connection gets
// one connection to the system bus, opened when it first needs it (its
// first AddMatch, or a call for a name this bus does not have),
// authenticated as nodeinit, with unix fd passing when the client has it.
// Calls and the client's replies and signals go up with their serials;
// replies, errors, signals and calls come down with their destination
// rewritten to the client's unique name here, the descriptors they carry
// passed on. AddMatch and RemoveMatch hold here and are also sent up, with
// no reply asked. GetNameOwner, NameHasOwner, StartServiceByName,
// RequestName and ReleaseName of a name this bus does not have, ListNames
// (with this bus's names added), ListActivatableNames, GetId and the
// questions about a connection there (GetConnectionUnixUser and the like)
// go up; what would change or watch the whole system bus
// (UpdateActivationEnvironment, ReloadConfig, BecomeMonitor) does not, as
// it would be nodeinit's call there, not the client's;
// KillUnit of logind's unit stays here, every other call to systemd goes
// up. Signals of a logind up there are dropped: org.freedesktop.login1
// here is nodeinit's. The queue up is bounded as a client's is, messages
// coming down at 256 KiB, calls waiting for a reply at 256; an upstream
// that fails or does not read ends only that client's pass-through: its
// calls waiting get NoReply, later ones ServiceUnknown, and logind still
// answers on the same connection. A kubelet configured for the systemd
// cgroup driver where there is no system bus is refused at start
// (RequireSystemBus).
//
// An inhibitor's pipe is made with O_CLOEXEC and its write end is closed in
// nodeinit as soon as it is sent, so the lock's lifetime is the client's
// alone; its read end waits in Go's poller, and Close releases it.
package logind
