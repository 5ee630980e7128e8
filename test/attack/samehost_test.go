package attack

import (
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/test/internal/linecmd"
	"github.com/velo-go/velo/test/internal/linecmd/driver"
)

// TestSameHostSocket attacks the victim's same-host socket, the way into its memory that the
// same-host path opens (docs/architecture.md, "Who may open a channel"), while the legitimate
// consumer reads through that path:
//
//   - without_the_secret: the attacker, of the victim's own user but without the cluster secret,
//     connects, takes the greeting, says hello in the legitimate consumer's name with a proof of
//     random bytes, and sends read frames for guessed keys anyway;
//   - another_user: the same from a process of another user (root only), which must not even
//     connect (the socket's directory is the victim's, mode 0700).
//
// Each must get no ring (no descriptor passed), no byte after the handshake, and no marker;
// afterAttack then asks its questions, the legitimate get among them on the same-host path.
func TestSameHostSocket(t *testing.T) {
	if !linecmd.SameHostOn() {
		t.Skip("skipped: the same-host path is off (VELO_TEST_SAME_HOST=1, make test-attack-samehost, turns it on)")
	}
	f := newFixture(t, fixtureOptions{})
	socket := f.socket(t)
	// Keys an attacker would guess: the first slots, tokens 0 and 1, at the victim's heap.
	var guesses []guardRead
	for slot := range uint32(4) {
		for tok := range uint64(2) {
			guesses = append(guesses, guardRead{Slot: slot, Token: tok, Addr: f.v.heap.addr, Len: 4096})
		}
	}
	attack := func(t *testing.T, atk *proc) map[string]any {
		r := atk.ok(map[string]any{"op": "shm_raw", "socket": socket, "sender": f.l.id, "inc": f.l.inc,
			"marker": hex.EncodeToString(f.marker), "reads": guesses})
		t.Logf("%s at the same-host socket: %v", atk.Name, r)
		assert.Zero(t, num(r["rings"]), "the owner passed a ring to a process without the secret")
		assert.Zero(t, num(r["bytes_after"]), "bytes came after the handshake: %v", r["after"])
		assert.Equal(t, false, r["marker_seen"], "the secret marker came through the socket")
		return r
	}
	t.Run("without_the_secret", func(t *testing.T) {
		f.t = t
		r := attack(t, f.atk)
		assert.Equal(t, true, r["greeted"], "the owner did not greet a process of its own user: the attack did not reach the proof")
		assert.Equal(t, float64(1), r["answer_code"], "the owner did not refuse the hello without a proof of the secret")
		f.afterAttack("a hello without the secret at the same-host socket")
	})
	t.Run("another_user", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Skip("skipped: running a process as another user needs root")
		}
		f.t = t
		r := attack(t, startAs(t, "attacker-other-user", bins.attacker, 65534))
		assert.Equal(t, false, r["connected"], "a process of another user connected to the same-host socket")
		assert.Contains(t, r["err"], "permission denied")
		f.afterAttack("another user at the same-host socket")
	})
	// Only the legitimate consumer's channels are open, and it still reads through them.
	ok, _ := f.sameHostTo(f.legit)
	assert.True(t, ok, "the legitimate consumer lost its same-host path")
}

// socket is the victim's same-host socket in the fixture's directory.
func (f *fixture) socket(t *testing.T) string {
	t.Helper()
	var path string
	require.Eventually(t, func() bool {
		ents, err := os.ReadDir(f.shmDir)
		require.NoError(t, err)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), f.v.id) {
				path = filepath.Join(f.shmDir, e.Name())
				return true
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond, "no socket of the victim in %s", f.shmDir)
	return path
}

// sameHostTo asks p whether its reads from the victim take the same-host path.
func (f *fixture) sameHostTo(p *proc) (bool, string) {
	r := p.ok("samehost " + f.v.id)
	why, _ := r["why"].(string)
	return r["same_host"] == true, why
}

// startAs starts bin as user uid (and its group), from a copy in a directory that user may enter:
// the suite's build directory is private to this user.
func startAs(t *testing.T, name, bin string, uid int) *proc {
	t.Helper()
	dir, err := os.MkdirTemp("", "velo-attack-other-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	data, err := os.ReadFile(bin)
	require.NoError(t, err)
	copyBin := filepath.Join(dir, filepath.Base(bin))
	require.NoError(t, os.WriteFile(copyBin, data, 0o755))
	cmd := exec.Command(copyBin)
	cmd.Env = env(false)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	return &proc{Proc: driver.StartT(t, name, cmd), t: t}
}
