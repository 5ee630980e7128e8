package auth

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// MinSecretLen is the shortest cluster secret accepted, in bytes: 32 random bytes, or a passphrase
// at least that long.
const MinSecretLen = 32

// Environment variables a cluster secret can come from (SecretsFromEnv).
const (
	SecretEnv     = "VELO_CLUSTER_SECRET"
	NextSecretEnv = "VELO_CLUSTER_SECRET_NEXT"
	SecretFileEnv = "VELO_CLUSTER_SECRET_FILE"
)

// ErrNoSecret: no usable secret was configured (empty file, unset variable, too short).
var ErrNoSecret = errors.New("auth: no usable cluster secret")

// Secrets are the cluster's pre-shared secrets: the current one, with which this instance proves
// itself, and optionally the next one, which it also accepts. Rotation without a dropped
// connection takes three steps across the cluster: every node accepts the new secret (current old,
// next new), then every node proves with it (current new, next old), then the old one goes.
type Secrets struct {
	origin string // where the secrets come from, for messages

	mu      sync.Mutex
	current []byte
	next    []byte
	// File-backed secrets reload when the file changes; checked at most once per reloadEvery.
	path      string
	modTime   time.Time
	size      int64
	checkedAt time.Time
	reloadErr error
}

// reloadEvery bounds how often a file-backed credential looks at its files.
const reloadEvery = time.Second

// NewSecrets holds fixed secrets: current, and an optional next one to accept as well.
func NewSecrets(current []byte, next ...[]byte) (*Secrets, error) {
	s := &Secrets{origin: "secrets given in code"}
	var n []byte
	if len(next) > 1 {
		return nil, fmt.Errorf("auth: NewSecrets takes one next secret, got %d", len(next))
	}
	if len(next) == 1 {
		n = next[0]
	}
	if err := s.set(current, n); err != nil {
		return nil, err
	}
	return s, nil
}

// SecretsFromFile reads the secrets from a file: the first non-empty line is the current secret,
// the second, if any, the next one (lines starting with # are comments; surrounding whitespace is
// trimmed). The file is read again when it changes, so rotating is editing it. It should be
// readable by the service's user only; a file others can read is refused.
func SecretsFromFile(path string) (*Secrets, error) {
	s := &Secrets{origin: "secret file " + path, path: path}
	if err := s.loadFile(); err != nil {
		return nil, err
	}
	return s, nil
}

// SecretsFromEnv reads VELO_CLUSTER_SECRET (current) and VELO_CLUSTER_SECRET_NEXT (optional), or,
// when VELO_CLUSTER_SECRET_FILE is set, that file (SecretsFromFile). It returns nil and no error
// when none of them is set: the control plane is then unauthenticated.
func SecretsFromEnv() (*Secrets, error) {
	if p := os.Getenv(SecretFileEnv); p != "" {
		return SecretsFromFile(p)
	}
	cur, ok := os.LookupEnv(SecretEnv)
	if !ok {
		if _, next := os.LookupEnv(NextSecretEnv); next {
			return nil, fmt.Errorf("%w: %s is set but %s is not (the next secret is accepted beside a current one)", ErrNoSecret, NextSecretEnv, SecretEnv)
		}
		return nil, nil
	}
	s := &Secrets{origin: "environment variable " + SecretEnv}
	if err := s.set([]byte(strings.TrimSpace(cur)), []byte(strings.TrimSpace(os.Getenv(NextSecretEnv)))); err != nil {
		return nil, err
	}
	return s, nil
}

// same reports whether s and o hold the same current and next secrets (hmac.Equal, as every
// comparison of secrets here).
func (s *Secrets) same(o *Secrets) bool {
	if s == o {
		return true
	}
	s.mu.Lock()
	cur, next := s.current, s.next
	s.mu.Unlock()
	o.mu.Lock()
	defer o.mu.Unlock()
	return hmac.Equal(cur, o.current) && hmac.Equal(next, o.next)
}

// String describes where the secrets come from; it never shows them.
func (s *Secrets) String() string {
	if s == nil {
		return "no cluster secret"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next != nil {
		return s.origin + " (current and next)"
	}
	return s.origin
}

// GoString is String: %#v must not print the secret either.
func (s *Secrets) GoString() string { return s.String() }

func (s *Secrets) set(current, next []byte) error {
	if len(current) < MinSecretLen {
		return fmt.Errorf("%w: the secret from %s has %d bytes, at least %d are needed (generate one with: head -c 32 /dev/urandom | base64)",
			ErrNoSecret, s.origin, len(current), MinSecretLen)
	}
	if len(next) > 0 && len(next) < MinSecretLen {
		return fmt.Errorf("%w: the next secret from %s has %d bytes, at least %d are needed", ErrNoSecret, s.origin, len(next), MinSecretLen)
	}
	s.current = bytes.Clone(current)
	s.next = nil
	if len(next) > 0 {
		s.next = bytes.Clone(next)
	}
	return nil
}

func (s *Secrets) loadFile() error {
	st, err := os.Stat(s.path)
	if err != nil {
		return fmt.Errorf("auth: cluster secret file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("auth: cluster secret file %s is readable by others (mode %v): chmod 600 it", s.path, st.Mode().Perm())
	}
	b, err := os.ReadFile(s.path)
	if err != nil {
		return fmt.Errorf("auth: cluster secret file: %w", err)
	}
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := bytes.TrimSpace(sc.Bytes())
		if len(l) == 0 || l[0] == '#' {
			continue
		}
		lines = append(lines, bytes.Clone(l))
	}
	switch {
	case len(lines) == 0:
		return fmt.Errorf("%w: %s holds no secret (first line: the current secret; second: the next one)", ErrNoSecret, s.path)
	case len(lines) > 2:
		return fmt.Errorf("auth: %s holds %d secrets; it takes the current one and at most one next", s.path, len(lines))
	}
	var next []byte
	if len(lines) == 2 {
		next = lines[1]
	}
	if err := s.set(lines[0], next); err != nil {
		return err
	}
	s.modTime, s.size = st.ModTime(), st.Size()
	return nil
}

// keys returns the secret to prove with and the secrets to accept, reloading a changed file. A
// file that became unusable keeps the last good secrets (the error is reported by ReloadError).
func (s *Secrets) keys(now time.Time) (current []byte, accept [][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.path != "" && now.Sub(s.checkedAt) >= reloadEvery {
		s.checkedAt = now
		if st, err := os.Stat(s.path); err != nil || !st.ModTime().Equal(s.modTime) || st.Size() != s.size {
			old, oldNext := s.current, s.next
			if err := s.loadFile(); err != nil {
				s.current, s.next, s.reloadErr = old, oldNext, err
			} else {
				s.reloadErr = nil
			}
		}
	}
	accept = [][]byte{s.current}
	if s.next != nil {
		accept = append(accept, s.next)
	}
	return s.current, accept
}

// ReloadError is why the secret file could not be read again the last time it changed (the last
// good secrets stay in use), or nil.
func (s *Secrets) ReloadError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadErr
}

// ProofLen is the length of a proof.
const ProofLen = sha256.Size

// Proof roles: each side of a handshake proves under its own role, so a proof one side sent can
// never be reflected back as the other side's.
const (
	RoleDialer   = "dialer"
	RoleAcceptor = "acceptor"
	RoleUCXHello = "ucx-hello"
	// RoleUCXFrames labels the key that seals the UCX frames following a hello (HelloKey).
	RoleUCXFrames = "ucx-frames"
	roleSession   = "session"
)

// mac is HMAC-SHA256 under key over a domain label, the role, and each part with its length, so
// that no two different transcripts encode alike.
func mac(key []byte, role string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("velo-auth-v1\x00"))
	m.Write([]byte(role))
	m.Write([]byte{0})
	var n [4]byte
	for _, p := range parts {
		binary.BigEndian.PutUint32(n[:], uint32(len(p)))
		m.Write(n[:])
		m.Write(p)
	}
	return m.Sum(nil)
}

// Prove returns this side's proof for role over the transcript, under the current secret.
func (s *Secrets) Prove(role string, transcript ...[]byte) []byte {
	cur, _ := s.keys(time.Now())
	return mac(cur, role, transcript...)
}

// Verify reports whether proof is the peer's proof for role over the transcript under any
// accepted secret (current or next). It compares in constant time.
func (s *Secrets) Verify(proof []byte, role string, transcript ...[]byte) bool {
	_, accept := s.keys(time.Now())
	ok := false
	for _, k := range accept {
		if hmac.Equal(proof, mac(k, role, transcript...)) {
			ok = true
		}
	}
	return ok
}

// Session derives the key both sides of a handshake share from the dialer's proof: the secret
// that made it (the dialer's current one, which the acceptor also accepts) keyed over the
// transcript. Dialer and acceptor call it with the same arguments and get the same key; nobody
// without that secret can compute it, though the proof travels in the clear. It reports false
// when no accepted secret made the proof.
func (s *Secrets) Session(dialerProof []byte, transcript ...[]byte) ([]byte, bool) {
	_, accept := s.keys(time.Now())
	for _, k := range accept {
		if hmac.Equal(dialerProof, mac(k, RoleDialer, transcript...)) {
			return mac(k, roleSession, transcript...), true
		}
	}
	return nil, false
}

// HelloProof is the proof over msg (a UCX hello and the receiver it is for) under a session key.
func HelloProof(session, msg []byte) []byte { return mac(session, RoleUCXHello, msg) }

// HelloValid reports whether proof is HelloProof of msg under any of the session keys.
func HelloValid(sessions [][]byte, msg, proof []byte) bool {
	ok := false
	for _, k := range sessions {
		if hmac.Equal(proof, mac(k, RoleUCXHello, msg)) {
			ok = true
		}
	}
	return ok
}

// HelloKey reports whether proof is HelloProof of msg under one of the session keys and, if it
// is, returns the key that seals the frames following that hello: derived from the same session
// key over the same hello under its own role, so it is one key per hello (one endpoint, one
// direction), known only to the two sides of that session. The proof travels in the clear and
// tells nothing of it. Every session key is tried, whichever matches.
func HelloKey(sessions [][]byte, msg, proof []byte) ([]byte, bool) {
	var match []byte
	for _, k := range sessions {
		if hmac.Equal(proof, mac(k, RoleUCXHello, msg)) {
			match = k
		}
	}
	if match == nil {
		return nil, false
	}
	return mac(match, RoleUCXFrames, msg), true
}
