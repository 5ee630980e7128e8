// Package authtest makes real credentials for tests: a cluster CA, certificates it signs (valid,
// expired, for another CA), revocation lists, and secret files, all written as the PEM and text
// files an operator would deploy.
package authtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/velo-go/velo/velo/auth"
)

// TB is what the helpers need of a test (testing.TB has it; a benchmark command can supply its
// own).
type TB interface {
	Helper()
	Fatal(args ...any)
	TempDir() string
}

// CA is a cluster certificate authority.
type CA struct {
	Cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	CAFile  string // the CA certificate, PEM
	dir     string
	serial  int64
	revoked []x509.RevocationListEntry
}

// NewCA creates a CA and writes its certificate under a temporary directory.
func NewCA(t TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{Cert: cert, key: key, dir: t.TempDir(), serial: 1}
	ca.CAFile = filepath.Join(ca.dir, "ca.pem")
	writePEM(t, ca.CAFile, "CERTIFICATE", der)
	return ca
}

// Member is one instance's certificate and key files.
type Member struct {
	CertFile, KeyFile string
	Serial            *big.Int
	NotAfter          time.Time
}

// Issue signs a certificate for name valid from notBefore to notAfter and writes its files.
func (ca *CA) Issue(t TB, name string, notBefore, notAfter time.Time) Member {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.serial++
	serial := big.NewInt(ca.serial)
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	m := Member{CertFile: filepath.Join(ca.dir, name+".pem"), KeyFile: filepath.Join(ca.dir, name+".key"), Serial: serial, NotAfter: notAfter}
	writePEM(t, m.CertFile, "CERTIFICATE", der)
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, m.KeyFile, "EC PRIVATE KEY", kb)
	return m
}

// Valid issues a certificate valid now for a day.
func (ca *CA) Valid(t TB, name string) Member {
	return ca.Issue(t, name, time.Now().Add(-time.Minute), time.Now().Add(24*time.Hour))
}

// Revoke adds m to the CA's revocation list and rewrites it; it returns the list's file.
func (ca *CA) Revoke(t TB, m Member) string {
	t.Helper()
	ca.revoked = append(ca.revoked, x509.RevocationListEntry{SerialNumber: m.Serial, RevocationTime: time.Now()})
	return ca.CRL(t)
}

// CRL writes the CA's current revocation list (possibly empty) and returns its file.
func (ca *CA) CRL(t TB) string {
	t.Helper()
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: big.NewInt(int64(len(ca.revoked) + 1)), ThisUpdate: time.Now(), NextUpdate: time.Now().Add(time.Hour),
		RevokedCertificateEntries: ca.revoked,
	}, ca.Cert, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(ca.dir, "crl.pem")
	writePEM(t, p, "X509 CRL", der)
	return p
}

// Files is the auth.TLSFiles of member m under this CA (and crl, when given).
func (ca *CA) Files(m Member, crl string) auth.TLSFiles {
	return auth.TLSFiles{CAFile: ca.CAFile, CertFile: m.CertFile, KeyFile: m.KeyFile, CRLFile: crl}
}

// TLS loads m's credentials.
func (ca *CA) TLS(t TB, m Member, crl string) *auth.TLS {
	t.Helper()
	c, err := auth.NewTLS(ca.Files(m, crl))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// SecretFile writes a secret file (mode 0600) holding the given lines and returns its path.
func SecretFile(t TB, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cluster-secret")
	WriteSecretFile(t, p, lines...)
	return p
}

// WriteSecretFile (re)writes a secret file in place, as an operator's rotation does.
func WriteSecretFile(t TB, path string, lines ...string) {
	t.Helper()
	var b []byte
	for _, l := range lines {
		b = append(append(b, l...), '\n')
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Secret is a fixed test secret of the minimum length, distinct per label.
func Secret(label string) string {
	s := "velo-test-secret-" + label
	for len(s) < auth.MinSecretLen {
		s += "-"
	}
	return s
}

func writePEM(t TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ClearEnv unsets every credential variable auth reads, for the rest of the test (t.Setenv
// restores them after it), so a test starts from an environment that names no credentials.
func ClearEnv(t interface {
	TB
	Setenv(key, value string)
}) {
	t.Helper()
	for _, v := range auth.EnvNames {
		t.Setenv(v, "")
		if err := os.Unsetenv(v); err != nil {
			t.Fatal(err)
		}
	}
}
