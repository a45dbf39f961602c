// Package bus is nodeinit's D-Bus broker: the bus the executor is given
// as its system bus. It owns the connections (the socket, the admission
// of peers, the handshake, the reading and writing of messages, the
// limits), answers as org.freedesktop.DBus (Hello, names, match rules,
// questions about a connection), routes each call for a service's name
// to that service, and passes what no service answers through to the
// container's own system bus. It knows nothing of logind: a service
// (package logind, through package service) tells it its names and
// objects and answers the calls it routes there.
//
// The files: bus_linux.go the socket, Status and Close; accept_linux.go
// the accept loops; refusals.go what they refuse, counted and logged;
// admission_linux.go who may connect; conn_linux.go one connection's life
// (its reader, writer and queue); sasl.go the handshake; dispatch_linux.go
// the routing of a message; driver.go org.freedesktop.DBus; match.go match
// rules; services.go the services' names and what the bus does for them;
// passthrough_linux.go what goes up to the system bus. A message's bytes,
// its descriptors and a peer's queue are package wire's (bus/internal);
// the connection up to the system bus is package upstream's.
//
// # Who may connect
//
// Only the executor and the processes below it may use the bus, and
// nobody before nodeinit names the executor (AdmitExecutor) or after it has
// ended (the bus holds its pidfd, so a process that gets its pid later is
// not taken for it). Who a peer is comes from the kernel, never from what
// the peer sends: its SO_PEERCRED, and its SO_PEERPIDFD where the kernel
// has it (Linux 6.5). The check is a walk up the peer's parents in /proc
// (init/proctree, at most 64 generations, reads that never wait for the
// process), then, with a pidfd, a check that the peer still lives, so that
// its pid was its own through the walk. A refused process is remembered by
// its pidfd (16 at most) while it lives, and each connection it opens
// again costs a poll, not a walk.
//
// The kubelet's one connect does not wait: on a full listen backlog it
// fails with EAGAIN, and graceful shutdown is off for the kubelet's life.
// A refusal costs the bus about what the connect cost the process that
// made it, so whoever connects in a loop from more threads than the bus
// has accept loops, at the same priority, fills the backlog (measured on
// 2 cores: with four threads against two loops and the backlog of 4096,
// 3 to 9 of 10 calls of the executor's got through). So the
// accept loops (accept_linux.go) win by priority: one per processor
// nodeinit may use (up to 16), each on an OS thread of its own at
// real-time priority (SCHED_FIFO 1, else nice -20; without CAP_SYS_NICE,
// neither, and one line says so). A loop preempts every ordinary process
// on its processor until the backlog is empty, so a process that connects
// in a loop runs only while there is room: its connects wait for the
// accepts. Between two accepts a loop reads SO_PEERCRED and refuses what
// needs no walk (a peer outside the pid namespace, one remembered, any
// once the executor has ended); it hands every other connection to a
// checker goroutine, or checks it itself when the checkers are behind,
// never dropping one unchecked. It logs and allocates nothing (what the
// loops allocated at the flood's rate made Go's collector stop them):
// refusals are counted, the first of a kind logged at once, the rest as
// one count per interval, whatever the verbosity.
//
// The socket is mode 0600. A connection that comes before AdmitExecutor
// waits for it, at most until its handshake's deadline: the executor runs
// before nodeinit learns its pid, and a kubelet refused then would never
// try again.
//
// # Limits
//
// Nobody on the node can take what the kubelet needs, within these limits
// (logind's own, on delay locks, are in package logind):
//
//   - connections: 4 per process, 32 in all, those of the executor
//     process itself not counted in the 32 (the kubelet, when it is the
//     executor, always finds a slot);
//   - the handshake and Hello within 10 s of the accept; after Hello, a
//     connection without a match rule that sends nothing for a minute is
//     dropped (it waits for nothing the bus would send; the kubelet's has
//     its rule for PrepareForShutdown);
//   - match rules: 64 per connection; a message: 64 KiB; the handshake:
//     16 lines of 512 bytes; descriptors a client has sent and no message
//     has claimed: 32.
//
// What a client can make nodeinit log or answer is bounded too
// (internal/clientlog). Strings it chose are clipped (128 bytes each, 512
// for an error text) in log lines and error replies. Of each kind of event
// a client causes (an error answered, a dropped connection, a lock taken
// or released), the first is logged at Info, the rest within 30 s only at
// V(2), and one Info line counts them every 30 s for as long as they go
// on; refusals, which come at the rate a process can connect, are never
// logged one by one, not even at V(2). Every goroutine that serves a client (the reader, the
// writer, the admission on the accept loop, a pass-through's reader and
// writer, and a service's, such as logind's inhibitor watcher) turns a
// panic into the end of that connection, or of what the goroutine held,
// logged with its stack: a bug there must not end PID 1.
//
// # Messages
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
// The bus is what a real one would be wherever a client can tell: Hello
// answers a unique name and is followed by NameAcquired; AddMatch and
// RemoveMatch keep real match rules, parsed as dbus-daemon parses them;
// replies carry the sender and the caller's unique name as destination.
// Everything else is answered with the D-Bus error a bus would give
// (UnknownMethod, UnknownObject, InvalidArgs, ServiceUnknown) and logged,
// and nothing a client sends can crash or block nodeinit: input that
// breaks the message format ends that connection, as the specification
// asks.
//
// Other clients than the kubelet ask the bus more first: python-dbus's
// get_object binds its proxy to the unique name GetNameOwner gives and
// introspects, GIO's proxies read GetAll and drop a signal whose sender is
// not the name's unique owner. So each service has a unique name of its
// own, ":nodeinit.0" for the first (logind), and connections get the
// numbers after them (":nodeinit.1" on). GetNameOwner gives it for the
// service's names; the service's replies and signals carry it as their
// sender; a match rule for sender='org.freedesktop.login1' matches it, as
// on a real bus. The prefix keeps this bus's unique names apart from those
// of the system bus behind it: dbus-daemon and dbus-broker hand out
// ":1.N", digits alone, and a unique name's elements may hold letters, so
// a destination with the prefix is this bus's and any other unique name is
// the system bus's. The bus answers GetNameOwner, NameHasOwner, ListNames,
// ListActivatableNames, GetId, StartServiceByName (for its own names),
// RequestName (refused: AccessDenied, as the system bus's policy refuses
// it, or InvalidArgs), ReleaseName, GetConnectionUnixUser,
// GetConnectionUnixProcessID, GetConnectionCredentials and
// ListQueuedOwners for its own names (a client's from its SO_PEERCRED,
// the bus's and the services' nodeinit's own), and for every object of
// its own and of a service Introspectable.Introspect, Peer.Ping and
// Peer.GetMachineId (from etc/machine-id, else var/lib/dbus/machine-id,
// under Options.Root, read as regular files, each only if it holds a
// machine-id as identity.Valid takes one).
//
// Nothing blocks nodeinit's PID-1 loop: Listen, Address, AdmitExecutor,
// Status and Close return at once (Close waits at most a second for the
// bus's goroutines, which end as soon as their descriptors close). Each
// connection has a reader and a writer goroutine; replies and signals
// wait in a queue of at most 64 messages and 256 KiB. While the queue is
// full the reader reads nothing more, so a client that sends many calls
// before it reads their replies (sd-bus's asynchronous calls, godbus's Go)
// waits in its own socket and is answered in full; a client that does not
// take a write within 10 s is dropped.
//
// Writes go out through the socket's raw descriptor with sendmsg and
// MSG_NOSIGNAL (internal/linux.SendAll). A plain write to a peer that has
// gone away makes the kernel raise SIGPIPE in the writer; in nodeinit,
// which catches signals by name and forwards them to the executor, that
// would be a signal of its own making, delivered or forwarded whenever
// SIGPIPE is ever caught. With MSG_NOSIGNAL the kernel raises none, and
// the write fails with EPIPE, which ends that one connection. Reads are
// recvmsg(2): the descriptors a client passes are held, at most 32, until
// the message that carries them (its UNIX_FDS header field) is read, and
// closed once it is answered, unless it goes on to the system bus with
// them.
//
// # The system bus behind it
//
// The executor's system bus is this one, so anything else it runs that
// needs the container's own system bus (a kubelet with cgroupDriver:
// systemd talks to systemd there) would break. With Options.Upstream (see
// upstream.Address: DBUS_SYSTEM_BUS_ADDRESS of nodeinit's environment, else
// /run/dbus/system_bus_socket) every message not for a service and not
// answered by the bus itself passes through: each client connection gets
// one connection to the system bus, opened when it first needs it (its
// first AddMatch that the system bus could answer, or a call for a name
// this bus does not have), authenticated as nodeinit, with unix fd passing
// when the client has it; messages pass byte for byte (package upstream).
// AddMatch and RemoveMatch hold here and also go up, and
// the system bus answers them, once the rule holds there (go-systemd adds
// its rule for JobRemoved on one connection and starts the job on
// another: an answer before the rule held could lose the job's end),
// unless the rule can match only what this bus sends (a service's signals
// and names): those are answered here, and the kubelet's rule for
// PrepareForShutdown opens no connection to the system bus. A rule the
// system bus refuses, or that cannot go up (too many of the client's calls
// wait there), is undone here too: the client knows of no rule to remove.
// GetNameOwner,
// NameHasOwner, StartServiceByName, RequestName and ReleaseName of a name
// this bus does not have, ListNames (with the services' names added),
// ListActivatableNames, GetId and the questions about a connection there
// (GetConnectionUnixUser and the like) go up; what would change or watch
// the whole system bus (UpdateActivationEnvironment, ReloadConfig,
// BecomeMonitor) does not, as it would be nodeinit's call there, not the
// client's. A call for a service's Shared name (logind's
// org.freedesktop.systemd1) goes to the service first, and what it leaves
// goes up.
//
// What comes down, what of it is dropped, and how a pass-through ends are
// package upstream's. A kubelet configured for the systemd cgroup driver
// where there is no system bus is refused at start
// (node.KubeletConfig.RequireSystemBus).
package bus
