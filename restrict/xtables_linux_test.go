package restrict

import (
	"fmt"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// saveCount counts what an iptables-save prints of rules and user chains:
// its -A lines and the chains it lists without a policy (":NAME - ").
func saveCount(out string) int {
	return len(regexp.MustCompile(`(?m)^-A |^:\S+ - `).FindAllString(out, -1))
}

// The probe reads from the kernel what iptables wrote, in a network
// namespace of the test's own: as many rules and user chains per backend
// as iptables-save lists (an empty user chain once), and the kubelet's
// hint chains in the mangle table of each.
func TestProbeReadsWhatIptablesWrote(t *testing.T) {
	testenv.RequireRoot(t)
	tool := map[string]string{}
	for _, name := range []string{"iptables-legacy", "ip6tables-legacy", "iptables-legacy-save", "ip6tables-legacy-save",
		"iptables-nft", "iptables-nft-save", "ip6tables-nft-save"} {
		tool[name] = testenv.RequireTool(t, name)
	}
	type result struct {
		x                   xtables
		wantLegacy, wantNft int
		err                 error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine, and its
		// network namespace with it. iptables runs in it too: a child
		// starts in its forking thread's namespaces.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("a network namespace of the test's own: %w", err)}
			return
		}
		var out strings.Builder
		run := func(argv ...string) error {
			b, err := exec.Command(tool[argv[0]], argv[1:]...).CombinedOutput()
			out.Write(b)
			if err != nil {
				return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, b)
			}
			return nil
		}
		for _, argv := range [][]string{
			{"iptables-legacy", "-A", "INPUT", "-j", "ACCEPT"},
			{"iptables-legacy", "-N", "EMPTY"},
			{"iptables-legacy", "-N", "FULL"},
			{"iptables-legacy", "-A", "FULL", "-j", "RETURN"},
			{"iptables-legacy", "-A", "FULL", "-p", "tcp", "--dport", "80", "-j", "DROP"},
			{"iptables-legacy", "-t", "mangle", "-N", "KUBE-IPTABLES-HINT"},
			{"ip6tables-legacy", "-t", "nat", "-N", "V6"},
			{"iptables-nft", "-A", "OUTPUT", "-j", "ACCEPT"},
			{"iptables-nft", "-N", "NFT-EMPTY"},
			{"iptables-nft", "-t", "mangle", "-N", "KUBE-KUBELET-CANARY"},
		} {
			if err := run(argv...); err != nil {
				done <- result{err: err}
				return
			}
		}
		r := result{x: probeXtables(kernelXtables{&container{root: "/"}})}
		out.Reset()
		if r.err = run("iptables-legacy-save"); r.err == nil {
			r.err = run("ip6tables-legacy-save")
		}
		r.wantLegacy = saveCount(out.String())
		out.Reset()
		if r.err == nil {
			if r.err = run("iptables-nft-save"); r.err == nil {
				r.err = run("ip6tables-nft-save")
			}
		}
		r.wantNft = saveCount(out.String())
		done <- r
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.x.legacy.err != nil || r.x.legacy.count != r.wantLegacy || !r.x.legacy.hints {
		t.Errorf("legacy: %+v; want %d rules and user chains, as iptables-legacy-save lists, and the hint", r.x.legacy, r.wantLegacy)
	}
	if r.x.nft.err != nil || r.x.nft.count != r.wantNft || !r.x.nft.hints {
		t.Errorf("nft: %+v; want %d rules and user chains, as iptables-nft-save lists, and the hint", r.x.nft, r.wantNft)
	}
	if r.wantLegacy != 7 || r.wantNft != 3 {
		t.Errorf("iptables-save lists %d legacy and %d nft rules and user chains; the test wrote 7 and 3", r.wantLegacy, r.wantNft)
	}
}
