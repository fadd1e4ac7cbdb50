package grpclimit

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/grpc"
)

// ServiceInfoProvider is what CheckServer reads the registered services
// from: *grpc.Server (and the xds package's GRPCServer) have it.
type ServiceInfoProvider interface {
	GetServiceInfo() map[string]grpc.ServiceInfo
}

// CheckServer reports the rules of i that can never apply to s: a
// WithMethodPolicy, WithMethodCost, WithStreamMessageCost or
// WithInternalMethods whose method or service s does not register (a typo
// leaves the method on the default policy at cost 1, or an internal method
// unguarded, silently), and a WithStreamMessageCost for a method, or
// a service without any, that receives no stream of messages from the
// client (its messages are never charged). The error names every such rule
// and the options that set it; nil means every rule matches. Call it once
// the services are registered, before Serve:
//
//	srv := grpc.NewServer(grpc.UnaryInterceptor(gl.Unary()), grpc.StreamInterceptor(gl.Stream()))
//	pb.RegisterOrdersServer(srv, orders)
//	if err := gl.CheckServer(srv); err != nil {
//		log.Fatal(err)
//	}
//
// Methods served by a grpc.UnknownServiceHandler are not registered, so
// rules meant for them are reported too.
func (i *Interceptor) CheckServer(s ServiceInfoProvider) error {
	switch {
	case i == nil || i.lim == nil:
		return errors.New("grpclimit: CheckServer on an Interceptor not built by New")
	case s == nil:
		return errors.New("grpclimit: CheckServer given nil")
	}
	services := s.GetServiceInfo()
	var bad []string
	for _, name := range slices.Sorted(maps.Keys(i.rules)) {
		r := i.rules[name]
		svc, method, _ := strings.Cut(name[1:], "/")
		info, ok := services[svc]
		clientStreams := false
		if ok && method != "" {
			ok = false
			for _, m := range info.Methods {
				if m.Name == method {
					ok, clientStreams = true, m.IsClientStream
				}
			}
		} else if ok {
			clientStreams = slices.ContainsFunc(info.Methods, func(m grpc.MethodInfo) bool { return m.IsClientStream })
		}
		what := "method"
		if method == "" {
			what = "service"
		}
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%q (%s): the server registers no such %s", name, r.options(), what))
		case r.msgCost > 0 && !clientStreams:
			if method == "" {
				what = "no method of the service"
			} else {
				what = "the method"
			}
			bad = append(bad, fmt.Sprintf("%q (WithStreamMessageCost): %s receives a client stream, so no message is charged", name, what))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("grpclimit: %d rule(s) cannot apply to the server's methods: %s", len(bad), strings.Join(bad, "; "))
	}
	return nil
}

// options names the options that set r.
func (r rule) options() string {
	var o []string
	if r.policy != "" {
		o = append(o, "WithMethodPolicy")
	}
	if r.cost != 0 {
		o = append(o, "WithMethodCost")
	}
	if r.msgCost != 0 {
		o = append(o, "WithStreamMessageCost")
	}
	if r.guarded {
		o = append(o, "WithInternalMethods")
	}
	return strings.Join(o, ", ")
}
