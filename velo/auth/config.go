package auth

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Mode is how a control plane authenticates peers; it travels in the TCP hello, so two instances
// configured differently refuse each other with a reason that says so.
type Mode uint8

const (
	ModeNone   Mode = 0 // no authentication: any process that reaches the port may talk
	ModeSecret Mode = 1 // HMAC challenge–response under the cluster secret
	ModeTLS    Mode = 2 // mutual TLS 1.3 with the cluster CA
)

func (m Mode) String() string {
	switch m {
	case ModeNone:
		return "none"
	case ModeSecret:
		return "secret"
	case ModeTLS:
		return "tls"
	}
	return "unknown"
}

// Config selects the credentials: at most one of Secrets and TLS. The zero Config is no
// authentication.
type Config struct {
	Secrets *Secrets
	TLS     *TLS
}

// Mode reports which authentication c selects.
func (c Config) Mode() Mode {
	switch {
	case c.TLS != nil:
		return ModeTLS
	case c.Secrets != nil:
		return ModeSecret
	}
	return ModeNone
}

// Validate refuses a Config that sets both.
func (c Config) Validate() error {
	if c.TLS != nil && c.Secrets != nil {
		return errors.New("auth: configure a cluster secret or mutual TLS, not both")
	}
	return nil
}

// String describes the configuration without any secret.
func (c Config) String() string {
	switch c.Mode() {
	case ModeTLS:
		return c.TLS.String()
	case ModeSecret:
		return "cluster secret from " + c.Secrets.String()
	}
	return "unauthenticated"
}

// LogLimiter lets through one log line per source per interval, so a flood of failing
// handshakes from one address costs one line per interval and a count, not one line each.
type LogLimiter struct {
	Interval time.Duration

	mu   sync.Mutex
	seen map[string]*limitEntry
}

type limitEntry struct {
	last       time.Time
	suppressed int
}

// Allow reports whether a line about source may be logged now, and how many lines about it were
// held back since the last one that was.
func (l *LogLimiter) Allow(source string, now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]*limitEntry{}
	}
	e := l.seen[source]
	if e == nil {
		if len(l.seen) >= 4096 { // a scan from many addresses: forget the old ones
			for k, v := range l.seen {
				if now.Sub(v.last) >= l.Interval {
					delete(l.seen, k)
				}
			}
		}
		if len(l.seen) >= 4096 {
			return false, 0
		}
		e = &limitEntry{}
		l.seen[source] = e
	} else if now.Sub(e.last) < l.Interval {
		e.suppressed++
		return false, 0
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	return true, n
}

// Environment variables of mutual TLS (FromEnv).
const (
	TLSCAEnv   = "VELO_TLS_CA"
	TLSCertEnv = "VELO_TLS_CERT"
	TLSKeyEnv  = "VELO_TLS_KEY"
	TLSCRLEnv  = "VELO_TLS_CRL"
)

// FromEnv builds the credentials an operator gives a process through its environment: mutual TLS
// when VELO_TLS_CA is set (with VELO_TLS_CERT, VELO_TLS_KEY and optionally VELO_TLS_CRL), else a
// cluster secret from VELO_CLUSTER_SECRET_FILE or VELO_CLUSTER_SECRET (SecretsFromEnv), else none.
// Variables it cannot use are an error, never ignored: a TLS file without VELO_TLS_CA, or a
// secret beside it.
func FromEnv() (Config, error) {
	if os.Getenv(TLSCAEnv) == "" {
		for _, v := range []string{TLSCertEnv, TLSKeyEnv, TLSCRLEnv} {
			if os.Getenv(v) != "" {
				return Config{}, fmt.Errorf("auth: %s is set but %s is not: mutual TLS needs the cluster CA beside this instance's certificate and key (set %s, or unset %s)", v, TLSCAEnv, TLSCAEnv, v)
			}
		}
	}
	if ca := os.Getenv(TLSCAEnv); ca != "" {
		if os.Getenv(SecretEnv) != "" || os.Getenv(SecretFileEnv) != "" {
			return Config{}, fmt.Errorf("auth: both %s and a cluster secret are set: choose one", TLSCAEnv)
		}
		t, err := NewTLS(TLSFiles{CAFile: ca, CertFile: os.Getenv(TLSCertEnv), KeyFile: os.Getenv(TLSKeyEnv), CRLFile: os.Getenv(TLSCRLEnv)})
		if err != nil {
			return Config{}, fmt.Errorf("%w (from %s, %s, %s)", err, TLSCAEnv, TLSCertEnv, TLSKeyEnv)
		}
		return Config{TLS: t}, nil
	}
	s, err := SecretsFromEnv()
	if err != nil || s == nil {
		return Config{}, err
	}
	return Config{Secrets: s}, nil
}

// EnvNames are the credential variables FromEnv reads, in its order.
var EnvNames = []string{TLSCAEnv, TLSCertEnv, TLSKeyEnv, TLSCRLEnv, SecretFileEnv, SecretEnv, NextSecretEnv}

// EnvVars are the names of the credential variables set in this process's environment, in
// EnvNames' order: VELO_CLUSTER_SECRET and VELO_CLUSTER_SECRET_NEXT when present (even empty:
// FromEnv refuses an empty secret), the file and TLS variables when not empty.
func EnvVars() []string {
	var set []string
	for _, v := range EnvNames {
		if v == SecretEnv || v == NextSecretEnv {
			if _, ok := os.LookupEnv(v); ok {
				set = append(set, v)
			}
		} else if os.Getenv(v) != "" {
			set = append(set, v)
		}
	}
	return set
}

// ErrEnvConflict: a transport was given credentials in code while the environment names others;
// one set would go unused, so the transport refuses to start.
var ErrEnvConflict = errors.New("auth: credentials in code and in the environment differ")

// Resolve returns the credentials a transport configured with c authenticates with. The
// environment's credentials (VELO_CLUSTER_SECRET[_FILE], VELO_TLS_*) are the operator's word for
// the whole cluster, so they are never left unused:
//
//   - c empty: the environment's (FromEnv), or none when it names none. Variables FromEnv cannot
//     use are an error naming them.
//   - c set: c, when the environment names none or the same credentials (FromEnv's, the same
//     secret file or secret, the same TLS files); otherwise an error wrapping ErrEnvConflict.
//
// The TCP transport calls it in New; docs/security.md says why this rule.
func (c Config) Resolve() (Config, error) {
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	set := EnvVars()
	if len(set) == 0 {
		return c, nil
	}
	names := strings.Join(set, ", ")
	env, err := FromEnv()
	if c.Mode() == ModeNone {
		if err != nil {
			return Config{}, fmt.Errorf("%w (given no credentials in code, the transport uses the environment's, from %s: fix them or unset them)", err, names)
		}
		return env, nil
	}
	if err == nil && c.same(env) {
		return c, nil
	}
	why := "names other credentials"
	if err != nil {
		why = fmt.Sprintf("names credentials that are unusable (%v)", err)
	}
	return Config{}, fmt.Errorf("%w: the code configured %s, and the environment (%s) %s: one of them would go unused; unset %s, or leave the transport's Auth empty (or set it from auth.FromEnv) to use the environment's",
		ErrEnvConflict, c, names, why, names)
}

// same reports whether c and o are the same credentials: the same secrets, or mutual TLS from the
// same files.
func (c Config) same(o Config) bool {
	switch {
	case c.Mode() != o.Mode():
		return false
	case c.TLS != nil:
		return c.TLS.files.clean() == o.TLS.files.clean()
	case c.Secrets != nil:
		return c.Secrets.same(o.Secrets)
	}
	return true
}

// clean is f with each path cleaned, for comparing two sets of files.
func (f TLSFiles) clean() TLSFiles {
	c := func(p string) string {
		if p == "" {
			return ""
		}
		return filepath.Clean(p)
	}
	return TLSFiles{CAFile: c(f.CAFile), CertFile: c(f.CertFile), KeyFile: c(f.KeyFile), CRLFile: c(f.CRLFile)}
}
