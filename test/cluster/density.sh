#!/bin/sh
# density.sh measures what each node of running clusters (make cluster)
# costs when idle, with every node Ready and one pod on each, and what is
# left of the machine. Several clusters, of either flavor, are measured in
# the same window and printed in one table. Run by hand, as root;
# docs/cluster.md keeps the figures.
#
#   test/cluster/density.sh [NAME...] [SECONDS]
#
# NAME is a cluster (nodeinit), SECONDS the idle window sampled (60). It
# deploys a DaemonSet of one busybox pod a node in each cluster, waits for
# each to run, lets the clusters settle for 30 s, then reads at both ends
# of the window:
#   - a node's cgroup (its container and its pods: the --cgroup-parent on a
#     cgroup v1 host, the container's cgroup on v2): the working set
#     (usage less inactive file pages, as the kubelet counts it) and CPU;
#   - the node's supervision: every process of the node container that is
#     not containerd, a shim, the kubelet, kube-proxy or what they started
#     (the pods): nodeinit for the nodeinit flavor; systemd, journald,
#     dbus-daemon, logind and the rest for the systemd flavor; their
#     proportional set size (PSS) and CPU;
#   - the machine: CPU busy (all cores) and MemAvailable.
# It prints one line per node and one per cluster, and deletes the
# DaemonSets.
set -eu

secs=60
names=
for a in "$@"; do
	case $a in
	*[!0-9]*) names="$names $a" ;;
	*) secs=$a ;;
	esac
done
names=${names:-nodeinit}
here=$(dirname "$0")
kubectl="$("$here/../k8s/build/build.sh" --cached | tail -n 1)/kubectl"

# use NAME: the cluster's kubeconfig and podman store in the environment.
use() {
	dir=/var/lib/nodeinit-cluster/$1
	[ -f "$dir/kubeconfig" ] || { echo "density.sh: no cluster $1 in $dir: make cluster NAME=$1 first" >&2; exit 1; }
	export KUBECONFIG="$dir/kubeconfig"
	export CONTAINERS_CONF="$dir/podman/containers.conf" CONTAINERS_STORAGE_CONF="$dir/podman/storage.conf"
}

cleanup() {
	for name in $names; do
		use "$name"
		$kubectl delete daemonset density --wait=false >/dev/null 2>&1 || true
	done
	rm -rf "$tmp"
}
tmp=$(mktemp -d)
trap cleanup EXIT

for name in $names; do
	use "$name"
	$kubectl wait --for=condition=Ready node --all --timeout=300s >/dev/null
	$kubectl apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: density, namespace: default}
spec:
  selector: {matchLabels: {app: density}}
  template:
    metadata: {labels: {app: density}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: sleep
        image: localhost/nodeinit/busybox:1
        imagePullPolicy: Never
        command: [sleep, "1000000"]
YAML
done
for name in $names; do
	use "$name"
	$kubectl rollout status daemonset/density --timeout=600s >/dev/null
	flavor=$(sed -n 's/^ *"flavor": "\(.*\)",*$/\1/p' "$dir/cluster.json")
	echo "${flavor:-nodeinit}" >"$tmp/$name.flavor"
	for n in $($kubectl get nodes -o jsonpath='{.items[*].metadata.name}'); do
		pid=$(podman inspect --format '{{.State.Pid}}' "$n")
		cg=/nodeinit-cluster-$name/$n
		[ -f /sys/fs/cgroup/cgroup.controllers ] && cg=$(podman inspect --format '{{.State.CgroupPath}}' "$n")
		echo "$n $(readlink "/proc/$pid/ns/pid") $cg" >>"$tmp/$name.nodes"
	done
done
sleep 30

# processes: every process of the machine, a line each: its pid namespace,
# pid, parent pid, executable's name, CPU (ns, its threads' run time as
# schedstat counts it: the clock ticks of stat are 10 ms) and PSS (kB).
processes() {
	for p in /proc/[0-9]*; do
		exe=$(readlink "$p/exe" 2>/dev/null) || continue
		ns=$(readlink "$p/ns/pid" 2>/dev/null) || continue
		stat=$(cat "$p/stat" 2>/dev/null) || continue
		pss=$(awk '$1 == "Pss:" {print $2}' "$p/smaps_rollup" 2>/dev/null) || continue
		cpu=$(cat "$p"/task/*/schedstat 2>/dev/null | awk '{ns += $1} END {printf "%d", ns}')
		# The fields after the name, in parentheses, which may hold spaces.
		set -- ${stat##*) }
		echo "$ns ${p#/proc/} $2 ${exe##*/} ${cpu:-0} ${pss:-0}"
	done
}

# cgroup CG: the working set (bytes) and CPU (ns) of a node's cgroup.
cgroup() {
	if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
		usage=$(cat "/sys/fs/cgroup$1/memory.current")
		inactive=$(awk '$1 == "inactive_file" {print $2}' "/sys/fs/cgroup$1/memory.stat")
		cpu=$(awk '$1 == "usage_usec" {print $2 * 1000}' "/sys/fs/cgroup$1/cpu.stat")
	else
		usage=$(cat "/sys/fs/cgroup/memory$1/memory.usage_in_bytes")
		inactive=$(awk '$1 == "total_inactive_file" {print $2}' "/sys/fs/cgroup/memory$1/memory.stat")
		cpu=$(cat "/sys/fs/cgroup/cpuacct$1/cpuacct.usage")
	fi
	echo "$(( usage - inactive )) $cpu"
}

# sample N: every node's cgroup and the machine's processes and CPU.
sample() {
	for name in $names; do
		while read -r n ns cg; do echo "$n $(cgroup "$cg")"; done <"$tmp/$name.nodes" >"$tmp/$name.cgroups.$1"
	done
	processes >"$tmp/processes.$1"
	awk '$1 == "cpu" {print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8}' /proc/stat >"$tmp/machine.$1"
}

sample 0
sleep "$secs"
sample 1

# supervision NS: the supervision's PSS (kB), CPU over the window (ns)
# and names of the node whose pid namespace is NS. A process is the node's
# work when it or one of its ancestors in the node is containerd, a shim,
# the kubelet or kube-proxy (the pods descend from the shims).
supervision() {
	awk -v ns="$1" '
		FILENAME ~ /\.0$/ { if ($1 == ns) t0[$2] = $5; next }
		$1 == ns { parent[$2] = $3; name[$2] = $4; ticks[$2] = $5; pss[$2] = $6 }
		END {
			for (p in name) {
				work = 0
				for (q = p; q in name; q = parent[q])
					if (name[q] ~ /^(containerd|containerd-shim.*|kubelet|kube-proxy)$/) { work = 1; break }
				if (work) continue
				kb += pss[p]; cpu += ticks[p] - ((p in t0) ? t0[p] : 0)
				names = names (names == "" ? "" : ",") name[p]
			}
			printf "%d %d %s\n", kb, cpu, names
		}' "$tmp/processes.0" "$tmp/processes.1"
}

printf '%-10s %-9s %-22s %12s %10s %16s %16s  %s\n' cluster flavor node "working set" CPU "supervision PSS" "supervision CPU" supervisors
for name in $names; do
	flavor=$(cat "$tmp/$name.flavor")
	while read -r n ns cg; do
		read -r ws0 cpu0 <<-X
		$(awk -v n="$n" '$1 == n {print $2, $3}' "$tmp/$name.cgroups.0")
		X
		read -r ws1 cpu1 <<-X
		$(awk -v n="$n" '$1 == n {print $2, $3}' "$tmp/$name.cgroups.1")
		X
		read -r kb cpuns who <<-X
		$(supervision "$ns")
		X
		awk -v c="$name" -v f="$flavor" -v n="$n" -v ws="$ws1" -v c0="$cpu0" -v c1="$cpu1" -v kb="$kb" -v t="$cpuns" -v s="$secs" -v who="$who" 'BEGIN {
			printf "%-10s %-9s %-22s %8.0f MiB %7.1f m %12.1f MiB %14.2f m  %s\n", c, f, n, ws / 1048576, (c1 - c0) / 1e6 / s, kb / 1024, t / 1e6 / s, who
		}'
	done <"$tmp/$name.nodes"
done | tee "$tmp/rows"
echo
read -r busy0 total0 <"$tmp/machine.0"
read -r busy1 total1 <"$tmp/machine.1"
printf '%-10s %-9s %5s %14s %12s %22s %16s\n' cluster flavor nodes "per node: WS" CPU "supervision PSS (share)" "supervision CPU"
awk '
	{ n[$1]++; f[$1] = $2; ws[$1] += $4; cpu[$1] += $6; pss[$1] += $8; scpu[$1] += $10; if (!($1 in order)) { order[$1] = ++k; name[k] = $1 } }
	END {
		for (i = 1; i <= k; i++) {
			c = name[i]
			printf "%-10s %-9s %5d %10.0f MiB %9.1f m %10.1f MiB (%4.1f%%) %14.2f m\n", c, f[c], n[c], ws[c] / n[c], cpu[c] / n[c], pss[c] / n[c], 100 * pss[c] / ws[c], scpu[c] / n[c]
		}
	}' "$tmp/rows"
awk -v b0="$busy0" -v a0="$total0" -v b1="$busy1" -v a1="$total1" -v cores="$(nproc)" -v s="$secs" \
	-v avail="$(awk '$1 == "MemAvailable:" {print $2}' /proc/meminfo)" -v load="$(cut -d' ' -f1-3 /proc/loadavg)" 'BEGIN {
	printf "idle %d s; the machine (%d cores): %.1f%% CPU busy, %.1f GiB available, load average %s\n", s, cores, 100 * (b1 - b0) / (a1 - a0), avail / 1048576, load
}'
