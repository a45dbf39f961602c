// Package bus owns nodeinit's stand-in for systemd-logind: the part of
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
//     delay. InhibitDelayMax follows it. Each file is read as a regular
//     file of at most 64 KiB, a link followed as systemd follows it
//     (internal/linux.ReadRegularFile): a FIFO, a device (a link to
//     /dev/zero) or a larger file is skipped and logged, never waited on.
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
// Only the executor and the processes below it may use the bus, and
// nobody before nodeinit names the executor (AdmitExecutor) or after it has
// ended (the bus holds its pidfd, so a process that gets its pid later is
// not taken for it). Who a peer is comes from the kernel, never from what
// the peer sends: its SO_PEERCRED, and its SO_PEERPIDFD where the kernel
// has it (Linux 6.5). The check runs on the accept loop before the
// connection costs the bus anything: a walk up the peer's parents in /proc
// (init/proctree, at most 64 generations, reads that never wait for the
// process), then, with a pidfd, a check that the peer still lives, so that
// its pid was its own through the walk. A refused process is remembered by
// its pidfd (16 at most) while it lives, and each connection it opens
// again costs a poll, not a walk. The accept loops (one per CPU, up to 4)
// call accept4 themselves, without Go's poller for a connection they
// refuse, so that they empty the listen backlog faster than a process
// connecting in a loop fills it: a full backlog fails the kubelet's one
// connect with EAGAIN. Measured on 2 cores: one thread connecting in a
// loop (23,000 connects a second) never filled it, and the kubelet got its
// lock 112 times of 112; two threads at once filled it for 1 in 500 to 1
// in 20 of their connects, and the kubelet got its lock 88 times of 88. More threads than the bus
// has accept loops can fill it more often: the kernel's listen queue is
// first come, first served. The socket is mode 0600.
//
// Nobody on the node can take what the kubelet needs, within these limits:
//
//   - connections: 4 per process, 32 in all, those of the executor
//     process itself not counted in the 32 (the kubelet, when it is the
//     executor, always finds a slot);
//   - the handshake and Hello within 10 s of the accept; after Hello, a
//     connection without a match rule that sends nothing for a minute is
//     dropped (it waits for nothing the bus would send; the kubelet's has
//     its rule for PrepareForShutdown);
//   - delay locks: 4 per process, 64 in all, the executor's own again
//     not counted in the 64;
//   - match rules: 64 per connection; a message: 64 KiB; the handshake:
//     16 lines of 512 bytes.
//
// What a client can make nodeinit log or answer is bounded too. Strings it
// chose are clipped (128 bytes each, 512 for an error text) in log lines
// and error replies. Of each kind of event a client causes (a refusal, an
// error answered, a dropped connection, a lock taken or released), the
// first is logged at Info, the rest within 30 s only at V(2), and one Info
// line counts them every 30 s for as long as they go on. Every goroutine
// that serves a client (the reader, the writer, an inhibitor's watcher,
// the admission on the accept loop, and a pass-through's reader and writer)
// turns a panic into the end of that connection, or the release of that
// lock, logged with its stack: a bug there must not end PID 1.
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
// ":nodeinit.0" (connections get ":nodeinit.1" on), which GetNameOwner
// gives for org.freedesktop.login1 (and org.freedesktop.systemd1), which
// replies and PrepareForShutdown carry as their sender, and which a match
// rule for sender='org.freedesktop.login1' matches, as on a real bus. The
// prefix keeps this bus's unique names apart from those of the system bus
// behind it: dbus-daemon and dbus-broker hand out ":1.N", digits alone,
// and a unique name's elements may hold letters, so a destination with
// the prefix is this bus's and any other unique name is the system bus's.
// The bus answers GetNameOwner, NameHasOwner, ListNames,
// ListActivatableNames, GetId, StartServiceByName (for its own names),
// RequestName (refused: AccessDenied, as the system bus's policy refuses
// it, or InvalidArgs), ReleaseName, GetConnectionUnixUser,
// GetConnectionUnixProcessID, GetConnectionCredentials and
// ListQueuedOwners for its own names (a client's from its SO_PEERCRED,
// the bus's and logind's nodeinit's own), Introspectable.Introspect (the
// bus; logind's objects from / down to /org/freedesktop/login1), Peer.Ping
// and Peer.GetMachineId (from etc/machine-id, else
// var/lib/dbus/machine-id, under Options.ConfigRoot, read as regular
// files), Properties.GetAll and Set (read-only) on logind's manager, and
// the manager's ListInhibitors as logind answers it: every lock held, by
// anyone who asks, as (what, who, why, mode, uid, pid), who and why as
// clipped when the lock was taken; systemd-inhibit --list shows them.
//
// Nothing blocks nodeinit's PID-1 loop: Listen, Address, AdmitExecutor,
// PrepareForShutdown, Status and Close return at once (Close waits at most
// a second for the bus's goroutines, which end as soon as their
// descriptors close). Each connection has a reader and a writer goroutine;
// replies and signals wait in a queue of at most 64 messages and 256 KiB.
// While the queue is full the reader reads nothing more, so a client that
// sends many calls before it reads their replies (sd-bus's asynchronous
// calls, godbus's Go) waits in its own socket and is answered in full; a
// client that does not take a write within 10 s is dropped.
//
// Writes go out through the socket's raw descriptor with sendmsg and
// MSG_NOSIGNAL (internal/linux.SendAll). A plain write to a peer that has
// gone away makes the kernel raise SIGPIPE in the writer; in nodeinit,
// which catches signals by name and forwards them to the executor, that
// would be a signal of its own making, delivered or forwarded whenever
// SIGPIPE is ever caught. With
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
// first AddMatch that the system bus could answer, or a call for a name
// this bus does not have),
// authenticated as nodeinit, with unix fd passing when the client has it.
// Calls and the client's replies and signals go up as the client sent
// them: its bytes, its byte order, its serials. Replies, errors, signals
// and calls come down as they came, their body untouched, only a
// destination written again (to the client's unique name here), the
// descriptors they carry passed on. Nothing passed through is decoded and
// encoded again: godbus writes a decoded struct back as an array of
// variants, which dbus-daemon takes for a corrupt message and answers by
// closing the connection (the kubelet's systemd cgroup driver sends
// StartTransientUnit with an a(sv); ListUnits answers an a(ssssssouso)).
// AddMatch and RemoveMatch hold here and also go up, and the system bus
// answers them, once the rule holds there (go-systemd adds its rule for
// JobRemoved on one connection and starts the job on another: an answer
// before the rule held could lose the job's end), unless the rule can
// match only what this bus sends (logind's signals and names): those are
// answered here, and the kubelet's rule for PrepareForShutdown opens no
// connection to the system bus. GetNameOwner, NameHasOwner,
// StartServiceByName, RequestName and ReleaseName of a name this bus does
// not have, ListNames (with this bus's names added), ListActivatableNames,
// GetId and the questions about a connection there (GetConnectionUnixUser
// and the like) go up; what would change or watch the whole system bus
// (UpdateActivationEnvironment, ReloadConfig, BecomeMonitor) does not, as
// it would be nodeinit's call there, not the client's; KillUnit of
// logind's unit stays here, every other call to systemd goes up.
//
// Anyone on the system bus may send a signal to the pass-through's unique
// name there (the stock policy allows any signal up to the bus's message
// size). So what comes down that the client did not ask for is dropped: a
// reply to no call of the client's, a signal to the pass-through alone
// that no match rule of the client's asks for (a rule's well-known sender
// matches none of these: the bus does not know who owns it up there),
// signals of a logind up there (org.freedesktop.login1 here is
// nodeinit's), and anything but a reply while the client's queue is full
// (its room for the bus's own replies is kept). A message larger than
// 244 KiB (the client's queue, less that room) is read through a 4 KiB
// buffer and dropped, its descriptors closed, nothing allocated for it;
// when it is the reply to a call of the client's, the call is answered
// with LimitsExceeded instead, so that it does not wait for ever.
// Each drop is counted; the first of a pass-through is logged at Info
// ("Dropped a message from the system bus for a D-Bus client"), the rest
// at V(2), and the count when the pass-through ends. A reply the client
// waits for waits for room in its queue, as long as the client reads. The
// queue up is bounded as a client's is, calls waiting for a reply at 256.
// An upstream that fails (the system bus closes the connection or goes
// away, a read or a write fails, the reader or writer panics, the queue up
// fills) ends the pass-through and closes the client's connection, so
// that its library connects again, as godbus's and go-systemd's users do
// (runc's systemd manager connects again when it finds its connection
// closed); its match rules and names up there are gone with it. A kubelet
// configured for the systemd cgroup driver where there is no system bus
// is refused at start (node.KubeletConfig.RequireSystemBus).
//
// An inhibitor's pipe is made with O_CLOEXEC and its write end is closed in
// nodeinit as soon as it is sent, so the lock's lifetime is the client's
// alone. Its read end waits in Go's poller for the hang-up alone, as
// logind's does: nothing is ever read from it, so a client that writes into
// its lock fills a one-page pipe and then blocks, at no cost to nodeinit
// (measured: 2 ms of CPU in 3 s of a writer, where reading what it wrote
// took 2.5 s). Close releases every lock.
package bus
