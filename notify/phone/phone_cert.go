package phone

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"
)

// Files of the phone page's certificate in the state folder.
const (
	CertFile = "phone-cert.pem" // 0644
	KeyFile  = "phone-key.pem"  // 0600
)

// certLifetime is how long a made certificate is valid. Phones show a
// warning for a self-signed certificate anyway; a lifetime near the 825 days
// that platforms accept for server certificates keeps it ordinary.
const certLifetime = 820 * 24 * time.Hour

// CertInfo describes the phone page's certificate.
type CertInfo struct {
	// Fingerprint is the SHA-256 of the certificate, as colon-separated
	// upper-case hex: what a browser's certificate viewer shows.
	Fingerprint string
	// SPKI is the base64 SHA-256 of the certificate's public key info: the
	// pin that Chromium's --ignore-certificate-errors-spki-list takes.
	SPKI string
	// Hosts are the IP addresses and names the certificate is valid for.
	Hosts []string
	// NotAfter is when it expires.
	NotAfter time.Time
	// Made is true when the call created a new certificate.
	Made bool
}

// Hosts returns the hosts the phone page's certificate must name: the
// host of url, and the host of listen unless it is empty or unspecified
// (0.0.0.0, ::).
func Hosts(listen, baseURL string) ([]string, error) {
	var hosts []string
	add := func(h string) {
		if h == "" {
			return
		}
		if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
			return
		}
		for _, x := range hosts {
			if strings.EqualFold(x, h) {
				return
			}
		}
		hosts = append(hosts, h)
	}
	if baseURL != "" {
		u, err := url.Parse(baseURL)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("phone.url %q must be an https:// address", baseURL)
		}
		add(u.Hostname())
	}
	if listen != "" {
		h, _, err := net.SplitHostPort(listen)
		if err != nil {
			return nil, fmt.Errorf("phone.listen %q: %w", listen, err)
		}
		add(h)
	}
	if len(hosts) == 0 {
		return nil, errors.New("the phone page needs an address: set phone.listen to a LAN address of this host, or phone.url")
	}
	return hosts, nil
}

// EnsureCert returns the phone page's certificate from the state folder
// dir, making a new self-signed ECDSA P-256 one when there is none, when it
// has expired or expires within a day, or when it does not name every host.
// The private key is written 0600, the certificate 0644, both owned like dir.
func EnsureCert(dir string, hosts []string, now time.Time) (tls.Certificate, CertInfo, error) {
	// The daemon starting and `parley-keyd pair` may both find no
	// certificate: the lock makes one of them make it and the other use it.
	unlock, err := lockState(dir)
	if err != nil {
		return tls.Certificate{}, CertInfo{}, err
	}
	defer unlock()
	cert, info, err := LoadCert(dir)
	switch {
	case err == nil && certFits(cert.Leaf, hosts, now):
		return cert, info, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return tls.Certificate{}, CertInfo{}, err
	}
	if err := makePhoneCert(dir, hosts, now); err != nil {
		return tls.Certificate{}, CertInfo{}, err
	}
	cert, info, err = LoadCert(dir)
	info.Made = true
	return cert, info, err
}

// LoadCert reads the phone page's certificate and key from the state
// folder dir. It reports fs.ErrNotExist when either file is missing.
func LoadCert(dir string) (tls.Certificate, CertInfo, error) {
	certPath, keyPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return tls.Certificate{}, CertInfo{}, err
		}
		return tls.Certificate{}, CertInfo{}, fmt.Errorf("phone certificate: %w", err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, CertInfo{}, fmt.Errorf("phone certificate: %w", err)
		}
	}
	return cert, describeCert(cert.Leaf), nil
}

// Fingerprint is the SHA-256 of a DER certificate as colon-separated
// upper-case hex, the form browsers show.
func Fingerprint(der []byte) string {
	fp := sha256.Sum256(der)
	parts := make([]string, len(fp))
	for i, b := range fp {
		parts[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(parts, ":")
}

func describeCert(c *x509.Certificate) CertInfo {
	spki := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	info := CertInfo{Fingerprint: Fingerprint(c.Raw), SPKI: base64.StdEncoding.EncodeToString(spki[:]), NotAfter: c.NotAfter}
	for _, ip := range c.IPAddresses {
		info.Hosts = append(info.Hosts, ip.String())
	}
	info.Hosts = append(info.Hosts, c.DNSNames...)
	return info
}

func certFits(c *x509.Certificate, hosts []string, now time.Time) bool {
	if now.Add(24 * time.Hour).After(c.NotAfter) {
		return false
	}
	for _, h := range hosts {
		if c.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

func makePhoneCert(dir string, hosts []string, now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "parley-keyd phone page " + hosts[0]},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	// The key first: a certificate without its key would be useless, a key
	// without its certificate is made again.
	if err := replaceOwned(dir, KeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return fmt.Errorf("writing the phone page's key: %w", err)
	}
	if err := replaceOwned(dir, CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("writing the phone page's certificate: %w", err)
	}
	return nil
}
