// Package footprint owns what nodeinit's own memory costs the node: the
// memory a PID 1 holds while it does almost nothing is every node
// container's, and a node's processes are not nodeinit's to change.
//
//   - Transparent huge pages are off for nodeinit's memory, not for its
//     children's (DisableHugePages, HugePages.Fork).
//   - The pages of nodeinit's binary that only its start needed are given
//     back once the node runs (ReleaseBinaryPages).
package footprint
