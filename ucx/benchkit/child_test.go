package benchkit

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

const childEnv = "BENCHKIT_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "announce":
		_ = Announce(map[string]int{"pid": os.Getpid()})
		UntilStdinCloses()
		os.Exit(0)
	case "silent":
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// The child is this test binary in another role: it announces its pid and exits once its stdin
// closes; a child that never announces is an error that says so, and nothing is left running.
func TestChildAnnouncesAndEndsWithItsStdin(t *testing.T) {
	var hello struct{ PID int }
	c, err := StartChild(append(os.Environ(), childEnv+"=announce"), &hello, "-test.run=^$")
	require.NoError(t, err)
	require.Equal(t, c.Cmd.Process.Pid, hello.PID)
	require.NoError(t, c.Stop())
	require.True(t, c.Cmd.ProcessState.Exited())

	_, err = StartChild(append(os.Environ(), childEnv+"=silent"), &hello, "-test.run=^$")
	require.ErrorContains(t, err, "did not announce itself")
}
