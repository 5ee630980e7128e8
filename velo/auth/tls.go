package auth

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// TLSFiles names the PEM files of mutual TLS: the cluster CA that signs every member's
// certificate, this instance's certificate and key, and optionally a revocation list signed by
// the CA.
type TLSFiles struct {
	CAFile   string
	CertFile string
	KeyFile  string
	CRLFile  string // optional
}

// Reasons a peer's certificate is refused; handshake errors wrap one of them.
var (
	ErrCertExpired   = errors.New("auth: certificate expired or not yet valid")
	ErrCertUnknownCA = errors.New("auth: certificate not signed by the cluster CA")
	ErrCertRevoked   = errors.New("auth: certificate revoked")
	ErrNoCertificate = errors.New("auth: the peer sent no certificate")
)

// TLS is mutual-TLS credentials loaded from files, reloaded when a file changes (checked at most
// once a second, on the next handshake), so a renewed certificate, a new CA bundle or a new
// revocation list applies to new connections without a restart. Connections already open keep
// the session they have.
type TLS struct {
	files TLSFiles

	mu        sync.Mutex
	state     *tlsState
	stamps    map[string]time.Time
	checkedAt time.Time
	reloadErr error
}

type tlsState struct {
	cert    tls.Certificate
	roots   *x509.CertPool
	cas     []*x509.Certificate
	revoked map[string]bool // serial numbers (big.Int text) on the CRL
}

// NewTLS loads the files and checks them: the key matches the certificate, the certificate is
// signed by the CA and valid now, the CRL (if any) is signed by the CA.
func NewTLS(files TLSFiles) (*TLS, error) {
	if files.CAFile == "" || files.CertFile == "" || files.KeyFile == "" {
		return nil, errors.New("auth: mutual TLS needs CAFile, CertFile and KeyFile")
	}
	t := &TLS{files: files}
	st, stamps, err := loadTLS(files)
	if err != nil {
		return nil, err
	}
	t.state, t.stamps = st, stamps
	return t, nil
}

// String names the files, never the key.
func (t *TLS) String() string {
	return fmt.Sprintf("mutual TLS (CA %s, certificate %s)", t.files.CAFile, t.files.CertFile)
}

func stampOf(path string) time.Time {
	st, err := os.Stat(path)
	if err != nil {
		return time.Time{}
	}
	return st.ModTime()
}

func loadTLS(f TLSFiles) (*tlsState, map[string]time.Time, error) {
	stamps := map[string]time.Time{}
	for _, p := range []string{f.CAFile, f.CertFile, f.KeyFile, f.CRLFile} {
		if p != "" {
			stamps[p] = stampOf(p)
		}
	}
	caPEM, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: cluster CA: %w", err)
	}
	st := &tlsState{roots: x509.NewCertPool(), revoked: map[string]bool{}}
	for rest := caPEM; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("auth: cluster CA %s: %w", f.CAFile, err)
		}
		st.roots.AddCert(c)
		st.cas = append(st.cas, c)
	}
	if len(st.cas) == 0 {
		return nil, nil, fmt.Errorf("auth: cluster CA %s holds no PEM certificate", f.CAFile)
	}
	st.cert, err = tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: certificate %s / key %s: %w", f.CertFile, f.KeyFile, err)
	}
	if st.cert.Leaf == nil {
		if st.cert.Leaf, err = x509.ParseCertificate(st.cert.Certificate[0]); err != nil {
			return nil, nil, fmt.Errorf("auth: certificate %s: %w", f.CertFile, err)
		}
	}
	if f.CRLFile != "" {
		if err := st.loadCRL(f.CRLFile); err != nil {
			return nil, nil, err
		}
	}
	if err := st.verify(st.cert.Certificate, time.Now()); err != nil {
		return nil, nil, fmt.Errorf("auth: this instance's own certificate %s: %w", f.CertFile, err)
	}
	return st, stamps, nil
}

func (st *tlsState) loadCRL(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("auth: revocation list: %w", err)
	}
	if blk, _ := pem.Decode(b); blk != nil {
		b = blk.Bytes
	}
	rl, err := x509.ParseRevocationList(b)
	if err != nil {
		return fmt.Errorf("auth: revocation list %s: %w", path, err)
	}
	signed := false
	for _, ca := range st.cas {
		if rl.CheckSignatureFrom(ca) == nil {
			signed = true
		}
	}
	if !signed {
		return fmt.Errorf("auth: revocation list %s is not signed by the cluster CA", path)
	}
	for _, e := range rl.RevokedCertificateEntries {
		st.revoked[e.SerialNumber.String()] = true
	}
	return nil
}

// verify checks a peer's chain against the cluster CA (any key usage: these are cluster members,
// not web servers, and no host name is checked: the instance ID in the hello, sent inside the
// session, is what the session authenticates) and the revocation list.
func (st *tlsState) verify(raw [][]byte, now time.Time) error {
	if len(raw) == 0 {
		return ErrNoCertificate
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrCertUnknownCA, err)
		}
		certs[i] = c
	}
	leaf := certs[0]
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return fmt.Errorf("%w: %q is valid from %s to %s", ErrCertExpired, leaf.Subject.CommonName,
			leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: st.roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("%w: %q: %v", ErrCertUnknownCA, leaf.Subject.CommonName, err)
	}
	for _, c := range certs {
		if st.revoked[c.SerialNumber.String()] {
			return fmt.Errorf("%w: %q (serial %s)", ErrCertRevoked, c.Subject.CommonName, c.SerialNumber)
		}
	}
	return nil
}

// current returns the credentials, reloading them when a file changed. A reload that fails keeps
// the last good credentials (ReloadError says why).
func (t *TLS) current(now time.Time) *tlsState {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.checkedAt) < reloadEvery {
		return t.state
	}
	t.checkedAt = now
	changed := false
	for p, stamp := range t.stamps {
		if !stampOf(p).Equal(stamp) {
			changed = true
		}
	}
	if !changed {
		return t.state
	}
	st, stamps, err := loadTLS(t.files)
	if err != nil {
		t.reloadErr = err
		return t.state
	}
	t.state, t.stamps, t.reloadErr = st, stamps, nil
	return t.state
}

// ReloadError is why the files could not be loaded again after they changed, or nil.
func (t *TLS) ReloadError() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reloadErr
}

// base is the configuration both sides share: TLS 1.3 only, this instance's certificate, and the
// peer's chain checked by verify (the standard verification is replaced because it would check a
// host name).
func (t *TLS) base(st *tlsState) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{st.cert},
		// Chain, expiry and revocation are checked in VerifyPeerCertificate against the cluster CA.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			return st.verify(raw, time.Now())
		},
	}
}

// ClientConfig is the configuration for a connection this instance dials.
func (t *TLS) ClientConfig() *tls.Config {
	c := t.base(t.current(time.Now()))
	c.ServerName = "velo"
	return c
}

// ServerConfig is the configuration for connections this instance accepts: each handshake takes
// the credentials current at that moment.
func (t *TLS) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := t.base(t.current(time.Now()))
			c.ClientAuth = tls.RequireAnyClientCert
			return c, nil
		},
	}
}

// PeerName is the name a verified peer certificate gives (its subject's common name), for logs
// and the introspection page.
func PeerName(cs tls.ConnectionState) string {
	if len(cs.PeerCertificates) == 0 {
		return ""
	}
	return cs.PeerCertificates[0].Subject.CommonName
}
