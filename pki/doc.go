// Package pki writes the private CA, the per-site certificates, nkeys and
// receipt-signing keys a topology's secured links need
// (`leafline topology certs`), and defines how a certificate names its site.
//
// Guarantees:
//   - credentials are never overwritten: every file is created exclusively,
//     and secrets (keys, seeds) are written with mode 0600;
//   - a site's certificate is only what its role needs: an edge's
//     authenticates it as a client and can serve no TLS connection, L1's
//     serves its listener, a hub's does both;
//   - every certificate names its site in a URI (SiteURI), which a leafline
//     listener binds to the site's nkey.
package pki
