#!/bin/sh
# density.sh measures what each node of a running cluster (make cluster)
# costs when idle, with every node Ready and one pod on each, and what is
# left of the machine. Run by hand, as root; docs/cluster.md keeps the
# figures.
#
#   test/cluster/density.sh [NAME [SECONDS]]
#
# NAME is the cluster (nodeinit), SECONDS the idle window sampled (60). It
# deploys a DaemonSet of one busybox pod a node, waits for each to run,
# lets the cluster settle for 30 s, then reads at both ends of the window:
#   - a node's cgroup (its container and its pods: the --cgroup-parent on a
#     cgroup v1 host, the container's cgroup on v2): the working set
#     (usage less inactive file pages, as the kubelet counts it) and CPU;
#   - nodeinit, PID 1 of the node: its proportional set size (PSS) and CPU;
#   - the machine: CPU busy (all cores) and MemAvailable.
# It prints one line per node and a summary, and deletes the DaemonSet.
set -eu

name=${1:-nodeinit}
secs=${2:-60}
dir=/var/lib/nodeinit-cluster/$name
[ -f "$dir/kubeconfig" ] || { echo "density.sh: no cluster $name in $dir: make cluster NAME=$name first" >&2; exit 1; }
export KUBECONFIG="$dir/kubeconfig"
export CONTAINERS_CONF="$dir/podman/containers.conf" CONTAINERS_STORAGE_CONF="$dir/podman/storage.conf"
here=$(dirname "$0")
kubectl="$("$here/../k8s/build/build.sh" --cached | tail -n 1)/kubectl"

nodes=$($kubectl get nodes -o jsonpath='{.items[*].metadata.name}')
count=$(echo "$nodes" | wc -w)
$kubectl wait --for=condition=Ready node --all --timeout=300s >/dev/null

$kubectl apply -f - >/dev/null <<EOF
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
EOF
trap '$kubectl delete daemonset density --wait=false >/dev/null 2>&1 || true' EXIT
$kubectl rollout status daemonset/density --timeout=600s >/dev/null
sleep 30

# cgroup NODE: the node's cgroup directory below the hierarchy's root.
cgroup() {
	if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
		podman inspect --format '{{.State.CgroupPath}}' "$1"
	else
		echo "/nodeinit-cluster-$name/$1"
	fi
}

# sample NODE: the node's working set (bytes), its cgroup's CPU (ns),
# nodeinit's PSS (kB) and CPU (clock ticks).
sample() {
	cg=$(cgroup "$1")
	pid=$(podman inspect --format '{{.State.Pid}}' "$1")
	if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
		usage=$(cat "/sys/fs/cgroup$cg/memory.current")
		inactive=$(awk '$1 == "inactive_file" {print $2}' "/sys/fs/cgroup$cg/memory.stat")
		cpu=$(awk '$1 == "usage_usec" {print $2 * 1000}' "/sys/fs/cgroup$cg/cpu.stat")
	else
		usage=$(cat "/sys/fs/cgroup/memory$cg/memory.usage_in_bytes")
		inactive=$(awk '$1 == "total_inactive_file" {print $2}' "/sys/fs/cgroup/memory$cg/memory.stat")
		cpu=$(cat "/sys/fs/cgroup/cpuacct$cg/cpuacct.usage")
	fi
	pss=$(awk '$1 == "Pss:" {print $2}' "/proc/$pid/smaps_rollup")
	ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
	echo "$(( usage - inactive )) $cpu $pss $ticks"
}

machine() { awk '$1 == "cpu" {print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8}' /proc/stat; }

tmp=$(mktemp -d)
for n in $nodes; do sample "$n" >"$tmp/$n.0"; done
m0=$(machine)
sleep "$secs"
m1=$(machine)
for n in $nodes; do sample "$n" >"$tmp/$n.1"; done
hz=$(getconf CLK_TCK)

printf '%-22s %12s %10s %14s %12s\n' node "working set" CPU "nodeinit PSS" "nodeinit CPU"
for n in $nodes; do
	read -r ws0 cpu0 pss0 t0 <"$tmp/$n.0"
	read -r ws1 cpu1 pss1 t1 <"$tmp/$n.1"
	awk -v n="$n" -v ws="$ws1" -v c0="$cpu0" -v c1="$cpu1" -v pss="$pss1" -v t0="$t0" -v t1="$t1" -v s="$secs" -v hz="$hz" 'BEGIN {
		printf "%-22s %8.0f MiB %7.1f m %10.1f MiB %9.2f m\n", n, ws / 1048576, (c1 - c0) / 1e6 / s, pss / 1024, (t1 - t0) / hz * 1000 / s
	}' | tee -a "$tmp/rows"
done
set -- $m0
busy0=$1 total0=$2
set -- $m1
awk -v b0="$busy0" -v a0="$total0" -v b1="$1" -v a1="$2" -v cores="$(nproc)" -v count="$count" -v s="$secs" \
	-v avail="$(awk '$1 == "MemAvailable:" {print $2}' /proc/meminfo)" '
	{ ws += $2; cpu += $4; pss += $6; ncpu += $8 }
	END {
		printf "%d nodes Ready, one pod each, idle %d s: per node %.0f MiB working set, %.1f millicores; nodeinit %.1f MiB PSS (%.1f%% of the node), %.2f millicores\n",
			count, s, ws / NR, cpu / NR, pss / NR, 100 * pss / ws, ncpu / NR
		printf "the machine (%d cores): %.1f%% CPU busy, %.1f GiB available\n", cores, 100 * (b1 - b0) / (a1 - a0), avail / 1048576
	}' "$tmp/rows"
rm -rf "$tmp"
