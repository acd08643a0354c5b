package control

import (
	"context"
	"crypto/subtle"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/pillarkit/pillar/cobbled/controlpb"
)

// Role is what a credential may do on the control plane.
type Role string

const (
	// RoleNode: a serving node registers itself, heartbeats, and reports
	// progress and faults for its own node id. Reads need no role.
	RoleNode Role = "node"
	// RoleWriter: SST builders and Lorry register batches and
	// publications.
	RoleWriter Role = "writer"
	// RoleAdmin: every call, including promote, rollback, retire, retract
	// and remove-node.
	RoleAdmin Role = "admin"
)

// Credential is one accepted bearer token. Several may share a role: a
// token is rotated by adding the new one, moving the clients to it and
// removing the old one, with no call refused in between.
type Credential struct {
	Role  Role
	Token string
	// Node binds a RoleNode credential to one node id: it may register,
	// heartbeat and report only as that node. The default value "" binds
	// none (any node id).
	Node string
}

// methodRoles names the roles that may make each mutating call; a call not
// listed is a read and needs no credential.
var methodRoles = map[string][]Role{
	controlpb.Control_RegisterNode_FullMethodName:        {RoleNode, RoleAdmin},
	controlpb.Control_Heartbeat_FullMethodName:           {RoleNode, RoleAdmin},
	controlpb.Control_ReportApplied_FullMethodName:       {RoleNode, RoleAdmin},
	controlpb.Control_ReportFault_FullMethodName:         {RoleNode, RoleAdmin},
	controlpb.Control_RegisterBatch_FullMethodName:       {RoleWriter, RoleAdmin},
	controlpb.Control_RegisterPublication_FullMethodName: {RoleWriter, RoleAdmin},
	controlpb.Control_RemoveNode_FullMethodName:          {RoleAdmin},
	controlpb.Control_RetractBatch_FullMethodName:        {RoleAdmin},
	controlpb.Control_Promote_FullMethodName:             {RoleAdmin},
	controlpb.Control_Rollback_FullMethodName:            {RoleAdmin},
	controlpb.Control_Retire_FullMethodName:              {RoleAdmin},
}

// principal is who made a call: its role and, for a node, the node id it
// is bound to ("" = any).
type principal struct {
	role Role
	node string
	via  string // "token" or the certificate identity
}

// credentialSet is the server's current credentials, replaced whole by
// SetCredentials.
type credentialSet struct {
	creds []Credential
}

func (s *Server) credentials() []Credential {
	if cs := s.creds.Load(); cs != nil {
		return cs.creds
	}
	return nil
}

// SetCredentials replaces the accepted tokens at once (a token file
// reloaded); calls in flight finish with the set they were checked
// against. Options.Token, when set, stays accepted as an admin token.
func (s *Server) SetCredentials(creds []Credential) error {
	for i, c := range creds {
		switch c.Role {
		case RoleNode, RoleWriter, RoleAdmin:
		default:
			return errf(ErrInvalid, "credential %d: role %q: want node, writer or admin", i+1, c.Role)
		}
		if c.Token == "" {
			return errf(ErrInvalid, "credential %d (%s): empty token", i+1, c.Role)
		}
		if c.Node != "" && c.Role != RoleNode {
			return errf(ErrInvalid, "credential %d (%s): only a node credential is bound to a node id", i+1, c.Role)
		}
	}
	all := append([]Credential(nil), creds...)
	if s.o.Token != "" {
		all = append(all, Credential{Role: RoleAdmin, Token: s.o.Token})
	}
	s.creds.Store(&credentialSet{creds: all})
	return nil
}

// whoFromToken matches the call's bearer token against every credential
// (constant time each, all compared).
func (s *Server) whoFromToken(ctx context.Context) (principal, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	var found principal
	ok := false
	for _, v := range md.Get("authorization") {
		tok, has := strings.CutPrefix(v, "Bearer ")
		if !has {
			continue
		}
		for _, c := range s.credentials() {
			if subtle.ConstantTimeCompare([]byte(tok), []byte(c.Token)) == 1 && !ok {
				found, ok = principal{role: c.Role, node: c.Node, via: "token"}, true
			}
		}
	}
	return found, ok
}

// whoFromCert reads a verified client certificate's identity
// pillar://<role>/<name> (as pillar dev certs writes them): role node
// binds the node id <name>.
func whoFromCert(ctx context.Context) (principal, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return principal{}, false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.PeerCertificates) == 0 {
		return principal{}, false
	}
	for _, u := range ti.State.PeerCertificates[0].URIs {
		if u.Scheme != "pillar" {
			continue
		}
		name := strings.TrimPrefix(u.Path, "/")
		switch r := Role(u.Host); r {
		case RoleNode:
			return principal{role: r, node: name, via: u.String()}, true
		case RoleWriter, RoleAdmin:
			return principal{role: r, via: u.String()}, true
		}
	}
	return principal{}, false
}

type nodeIDer interface{ GetNodeId() string }

// requestNode is the node id a node call acts for.
func requestNode(req any) string {
	switch r := req.(type) {
	case *controlpb.RegisterNodeRequest:
		return r.GetNode().GetId()
	case nodeIDer:
		return r.GetNodeId()
	}
	return ""
}

func (s *Server) authorize(ctx context.Context, method string, req any) error {
	roles, mutating := methodRoles[method]
	if s.o.NoAuth || !mutating {
		return nil
	}
	who, ok := s.whoFromToken(ctx)
	if !ok {
		who, ok = whoFromCert(ctx)
	}
	if !ok {
		return errf(ErrUnauthenticated, "%s: missing or wrong bearer token (and no client certificate with a pillar:// identity)", method)
	}
	allowed := false
	for _, r := range roles {
		allowed = allowed || r == who.role
	}
	short := method[strings.LastIndex(method, "/")+1:]
	var err error
	if !allowed {
		err = errf(ErrPermissionDenied, "%s: a %s credential (%s) may not call it; it needs %s", short, who.role, who.via, rolesText(roles))
	} else if id := requestNode(req); who.role == RoleNode && who.node != "" && id != who.node {
		err = errf(ErrPermissionDenied, "%s: the credential of node %q (%s) may not act for node %q", short, who.node, who.via, id)
	}
	if err != nil {
		s.refusals.Add(1)
		s.logRefusal(string(who.role)+"|"+who.node+"|"+who.via+"|"+short, err)
	}
	return err
}

// logRefusal logs a refusal the first time its (credential, method) is
// seen, so a misconfigured or hostile client cannot flood the log; at most
// maxRefusalKeys distinct ones are remembered.
func (s *Server) logRefusal(key string, err error) {
	const maxRefusalKeys = 1024
	s.refusedMu.Lock()
	if s.refused == nil {
		s.refused = map[string]bool{}
	}
	first := !s.refused[key] && len(s.refused) < maxRefusalKeys
	if first {
		s.refused[key] = true
	}
	s.refusedMu.Unlock()
	if first {
		s.o.Logger.Warn("control: call refused (logged once per credential and method)", "err", err)
	}
}

func rolesText(rs []Role) string {
	var ss []string
	for _, r := range rs {
		ss = append(ss, string(r))
	}
	return strings.Join(ss, " or ")
}

// authState is the Server's authorization state (see auth.go).
type authState struct {
	creds     atomic.Pointer[credentialSet]
	refusals  atomic.Int64
	refusedMu sync.Mutex
	refused   map[string]bool
}
