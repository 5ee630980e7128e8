package auth

import (
	"errors"
	"fmt"
	"os"
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
func FromEnv() (Config, error) {
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
