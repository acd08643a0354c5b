package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// DevOptions say what DevCerts makes. The zero value makes the default
// set.
type DevOptions struct {
	// Names are the components to make a certificate for, each
	// "<role>/<name>" or "<name>" (role = name). The default value is
	// control, node/n1, node/n2, node/n3, router, writer/lorry, admin,
	// reader.
	Names []string
	// Hosts are the DNS names and IP addresses every certificate is valid
	// for as a server. The default value is localhost, 127.0.0.1 and ::1.
	Hosts []string
	// Valid is how long the certificates are valid. The default value is
	// 30 days.
	Valid time.Duration
	// Now is the start of validity. The default value is time.Now (less a
	// minute, for clock skew).
	Now func() time.Time
}

// DefaultDevNames is DevOptions.Names's default.
var DefaultDevNames = []string{"control", "node/n1", "node/n2", "node/n3", "router", "writer/lorry", "admin", "reader"}

var devName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}(/[a-z0-9][a-z0-9-]{0,62})?$`)

// DevCerts writes a local certificate authority (ca.pem, ca.key) and, per
// name, <name>.pem and <name>.key (a "/" in the name becomes "-") into
// dir: ECDSA P-256 keys, each leaf valid as a server for Hosts and as a
// client, with the identity URI pillar://<role>/<name> (PeerIdentity).
// For tests and the demo: production certificates come from the
// operator's own CA. It returns the files written. An existing ca.pem in
// dir is refused (no silent overwrite of a CA others may trust).
func DevCerts(dir string, o DevOptions) ([]string, error) {
	names := o.Names
	if len(names) == 0 {
		names = DefaultDevNames
	}
	for _, n := range names {
		if !devName.MatchString(n) {
			return nil, fmt.Errorf("dev certs: name %q: want <role>/<name> or <name>, lower case letters, digits and -", n)
		}
	}
	hosts := o.Hosts
	if len(hosts) == 0 {
		hosts = []string{"localhost", "127.0.0.1", "::1"}
	}
	valid := o.Valid
	if valid <= 0 {
		valid = 30 * 24 * time.Hour
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	start := now().Add(-time.Minute)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("dev certs: %w", err)
	}
	caPath := filepath.Join(dir, "ca.pem")
	if _, err := os.Stat(caPath); err == nil {
		return nil, fmt.Errorf("dev certs: %s exists; remove it or name another --out", caPath)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("dev certs: %w", err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "pillar dev CA", Organization: []string{"pillar dev"}},
		NotBefore:             start,
		NotAfter:              start.Add(valid),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	var written []string
	if err := writePair(dir, "ca", caDER, caKey, &written); err != nil {
		return written, err
	}
	for _, n := range names {
		role, name := n, n
		if i := indexSlash(n); i >= 0 {
			role, name = n[:i], n[i+1:]
		}
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return written, err
		}
		id := &url.URL{Scheme: "pillar", Host: role, Path: "/" + name}
		t := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: n, Organization: []string{"pillar dev"}},
			NotBefore:    start,
			NotAfter:     start.Add(valid),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			URIs:         []*url.URL{id},
		}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				t.IPAddresses = append(t.IPAddresses, ip)
			} else {
				t.DNSNames = append(t.DNSNames, h)
			}
		}
		der, err := x509.CreateCertificate(rand.Reader, t, ca, &key.PublicKey, caKey)
		if err != nil {
			return written, err
		}
		file := role
		if name != role {
			file = role + "-" + name
		}
		if err := writePair(dir, file, der, key, &written); err != nil {
			return written, err
		}
	}
	return written, nil
}

func indexSlash(s string) int {
	for i := range len(s) {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func writePair(dir, base string, der []byte, key *ecdsa.PrivateKey, written *[]string) error {
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	certPath, keyPath := filepath.Join(dir, base+".pem"), filepath.Join(dir, base+".key")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("dev certs: %w", err)
	}
	*written = append(*written, certPath)
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return fmt.Errorf("dev certs: %w", err)
	}
	*written = append(*written, keyPath)
	return nil
}
