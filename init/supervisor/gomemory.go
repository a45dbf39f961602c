package supervisor

import "runtime/metrics"

// goMemory is the Go runtime's view of nodeinit's memory, in bytes, for the
// status line. heapLive is the heap's live objects as of the last
// collection, heapGoal the heap size the next one is to end by (never under
// 4 MiB, so a small heap grows for a while before it is collected), and
// heapHeld the heap's pages the runtime has not returned to the kernel:
// objects, free slots and free spans. stacks are the goroutines' and the
// threads' stacks, mapped all the memory the runtime has mapped less what
// it released.
type goMemory struct {
	heapLive, heapGoal, heapHeld, stacks, mapped, gcCycles uint64
}

// goMemoryMetrics are the runtime/metrics samples readGoMemory reads, in
// the order it sums them.
var goMemoryMetrics = [...]string{
	"/gc/heap/live:bytes",
	"/gc/heap/goal:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/stacks:bytes",
	"/memory/classes/os-stacks:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/gc/cycles/total:gc-cycles",
}

// readGoMemory reads the runtime's memory figures; cheap, no stop of the
// world. A metric the runtime does not know reads as 0.
func readGoMemory() goMemory {
	var samples [len(goMemoryMetrics)]metrics.Sample
	for i, name := range goMemoryMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples[:])
	var v [len(goMemoryMetrics)]uint64
	for i, sample := range samples {
		if sample.Value.Kind() == metrics.KindUint64 {
			v[i] = sample.Value.Uint64()
		}
	}
	return goMemory{
		heapLive: v[0],
		heapGoal: v[1],
		heapHeld: v[2] + v[3] + v[4],
		stacks:   v[5] + v[6],
		mapped:   v[7] - v[8],
		gcCycles: v[9],
	}
}
