package control

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/pillarkit/pillar/internal/batch"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// selfSigned returns a certificate for 127.0.0.1 and a pool trusting it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "control-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}, pool
}

func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	st := openStore(t, "sqlite:"+filepath.Join(t.TempDir(), "c.db"), 2)
	defer st.Close()
	srv, err := NewServer(&Options{Store: st, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	g := srv.GRPCServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	defer g.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := Dial(lis.Addr().String(), &ClientOptions{Token: testToken, TLS: &tls.Config{RootCAs: pool}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if seq, err := c.RegisterBatch(ctx, manifest("tls-1", 1, 2, batch.KindDelta)); err != nil || seq != 1 {
		t.Fatalf("over TLS: seq %d, %v", seq, err)
	}
	// A plaintext client cannot talk to the TLS server; an untrusting one
	// neither.
	for name, o := range map[string]*ClientOptions{"plaintext": {Token: testToken}, "untrusted": {Token: testToken, TLS: &tls.Config{}}} {
		bad, err := Dial(lis.Addr().String(), o)
		if err != nil {
			t.Fatal(err)
		}
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		if _, err := bad.Partitions(sctx); err == nil {
			t.Errorf("%s client reached the TLS server", name)
		} else if errors.Is(err, ErrInvalid) {
			t.Errorf("%s: unexpected error kind: %v", name, err)
		}
		scancel()
		bad.Close()
	}
}
