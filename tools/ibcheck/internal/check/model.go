package check

import (
	"fmt"
	"strings"
)

// Status is a check's verdict.
type Status int

// Verdicts, in increasing order of severity for the exit code. Skip and NotCompiled say that a
// check did not judge the node: Skip because it does not apply (no --ip given, not an mlx5 device,
// a fixture tree instead of the live system), NotCompiled because this binary cannot ask (built
// with CGO_ENABLED=0).
const (
	Pass Status = iota
	Skip
	NotCompiled
	Warn
	Fail
)

// String is the word the table prints.
func (s Status) String() string {
	switch s {
	case Pass:
		return "PASS"
	case Skip:
		return "SKIP"
	case NotCompiled:
		return "N/C"
	case Warn:
		return "WARN"
	case Fail:
		return "FAIL"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// JSON is the value the JSON report uses.
func (s Status) JSON() string {
	switch s {
	case NotCompiled:
		return "not_compiled_in"
	}
	return strings.ToLower(s.String())
}

// Answer is what a probe found, in the three-valued convention of package verbs: available, not
// available (a definite finding about the node), or inconclusive (the probe could not tell).
// Checks that only read configuration have no probe answer (AnswerNone).
type Answer int

// Probe answers.
const (
	AnswerNone Answer = iota
	Available
	NotAvailable
	Inconclusive
)

// JSON is the value of the report's "probe" field ("" for AnswerNone, which is left out).
func (a Answer) JSON() string {
	switch a {
	case Available:
		return "available"
	case NotAvailable:
		return "not_available"
	case Inconclusive:
		return "inconclusive"
	}
	return ""
}

// Fact is one named value a check found, for the JSON report and for the curious (the table
// shows the finding, which is written from the facts).
type Fact struct {
	Key   string
	Value string
}

// Result is one check's outcome.
type Result struct {
	// ID is the check's stable name ("port", "ucx_tls"); the JSON schema lists them all.
	ID string
	// Status is the verdict.
	Status Status
	// Probe is what the underlying probe answered, when the check ran one.
	Probe Answer
	// Finding says what was found, in words.
	Finding string
	// Fix says what to do; empty when there is nothing to do.
	Fix string
	// Facts are the values behind the finding.
	Facts []Fact
}

func (r *Result) fact(key, value string) { r.Facts = append(r.Facts, Fact{key, value}) }

// Report is the outcome of a run.
type Report struct {
	// Paths are the sysfs and device roots the node checks read, and whether they are the live
	// system.
	Sysfs, Dev string
	Live       bool
	// Port is the port the port-level checks judged ("mlx5_0:1"), empty when there was none;
	// PortSource says how it was chosen (see the PortFrom constants).
	Port       string
	PortSource string
	// CGO reports whether this binary has cgo (libibverbs, libmlx5, librdmacm, UCX) compiled in.
	CGO bool
	// Results in the order the checks ran.
	Results []Result
	// UCX is the linked UCX's resource list when it was asked for (--ucx); nil otherwise.
	UCX *UCXResources
}

// Counts tallies the results by status.
type Counts struct {
	Pass, Warn, Fail, Skip, NotCompiled int
}

// Counts tallies r's results.
func (r *Report) Counts() Counts {
	var c Counts
	for _, x := range r.Results {
		switch x.Status {
		case Pass:
			c.Pass++
		case Warn:
			c.Warn++
		case Fail:
			c.Fail++
		case Skip:
			c.Skip++
		case NotCompiled:
			c.NotCompiled++
		}
	}
	return c
}

// Exit codes of ibcheck.
const (
	ExitOK    = 0 // every check passed (or, without --strict, only warned, skipped or was not compiled in)
	ExitFail  = 1 // a check failed (with --strict: or warned, or was not compiled in)
	ExitUsage = 2 // the command line was wrong; nothing was checked
)

// Verdict is the overall status: Fail when any check failed; with strict, also when any check
// warned or could not run because it is not compiled in; Warn when any warned; Pass otherwise.
// Skipped checks never count: they do not apply to this node or this run.
func (r *Report) Verdict(strict bool) Status {
	c := r.Counts()
	switch {
	case c.Fail > 0:
		return Fail
	case strict && (c.Warn > 0 || c.NotCompiled > 0):
		return Fail
	case c.Warn > 0:
		return Warn
	}
	return Pass
}

// ExitCode is the process exit code for the report: ExitFail when Verdict is Fail, else ExitOK.
func (r *Report) ExitCode(strict bool) int {
	if r.Verdict(strict) == Fail {
		return ExitFail
	}
	return ExitOK
}

// Result returns the result of the check with the given ID.
func (r *Report) Result(id string) (Result, bool) {
	for _, x := range r.Results {
		if x.ID == id {
			return x, true
		}
	}
	return Result{}, false
}
