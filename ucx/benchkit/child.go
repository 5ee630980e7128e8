package benchkit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
)

// Child is this program started again in another role, for the other side of a two-process
// measurement. It announces itself with one JSON line on its stdout (its address, a key, what
// the parent needs) and lives until its stdin closes; its stderr is the parent's.
type Child struct {
	Cmd *exec.Cmd
	// In is the child's stdin: the harness may talk to it, and closing it ends the child.
	In io.WriteCloser
	// Out is the child's stdout after its announcement.
	Out *bufio.Reader
}

// StartChild runs os.Args[0] with args and env (nil: this process's environment) and decodes the
// child's first stdout line into hello.
func StartChild(env []string, hello any, args ...string) (*Child, error) {
	cmd := exec.Command(os.Args[0], args...)
	if env != nil {
		cmd.Env = env
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &Child{Cmd: cmd, In: in, Out: bufio.NewReader(out)}
	line, err := c.Out.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, hello)
	}
	if err != nil {
		c.Stop()
		return nil, fmt.Errorf("benchkit: the %v child did not announce itself: %w", args, err)
	}
	return c, nil
}

// Stop closes the child's stdin and waits for it to exit.
func (c *Child) Stop() error {
	c.In.Close()
	return c.Cmd.Wait()
}

// Announce is the child's side: it writes hello as the one JSON line StartChild reads.
func Announce(hello any) error {
	b, err := json.Marshal(hello)
	if err != nil {
		return err
	}
	_, err = fmt.Printf("%s\n", b)
	return err
}

// UntilStdinCloses blocks until the parent closes the child's stdin (or exits).
func UntilStdinCloses() { _, _ = io.Copy(io.Discard, os.Stdin) }

// writeJSONLine writes v as one JSON line (the two sides' messages after the announcement).
func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// readJSONLine reads one JSON line into v.
func readJSONLine(r *bufio.Reader, v any) error {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return err
	}
	return json.Unmarshal(line, v)
}
