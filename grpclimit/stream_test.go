package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	chatMethod   = "/test.Echo/Chat"   // bidirectional: echoes each message
	uploadMethod = "/test.Echo/Upload" // client-streaming: RecvMsg after a refusal too
)

// recvAfterRefusal is what Upload's handler saw: the errors of its RecvMsg
// calls after the first error, which it ignores, as a careless handler may.
type recvAfterRefusal struct {
	first error
	later []error
}

// echoDesc is a bidirectional and a client-streaming service written by
// hand (no generated code): Chat echoes every message; Upload keeps calling
// RecvMsg after an error, 3 times, and reports what it got to got.
func echoDesc(got chan<- recvAfterRefusal) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "test.Echo",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName: "Chat", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				for {
					m := new(wrapperspb.StringValue)
					if err := ss.RecvMsg(m); err != nil {
						if errors.Is(err, io.EOF) {
							return nil
						}
						return err
					}
					if err := ss.SendMsg(m); err != nil {
						return err
					}
				}
			},
		}, {
			StreamName: "Upload", ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				var r recvAfterRefusal
				for r.first == nil {
					r.first = ss.RecvMsg(new(wrapperspb.StringValue))
				}
				for range 3 {
					r.later = append(r.later, ss.RecvMsg(new(wrapperspb.StringValue)))
				}
				got <- r
				return r.first
			},
		}},
	}
}

// serveEcho starts a server with the health and echo services on a free
// loopback port, limited by gl, until the test ends; it returns the server
// (not yet serving when CheckServer may need it) and a connection to it.
func serveEcho(t testing.TB, gl *grpclimit.Interceptor, got chan<- recvAfterRefusal, opts ...grpc.ServerOption) (*grpc.Server, *grpc.ClientConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append([]grpc.ServerOption{grpc.UnaryInterceptor(gl.Unary()), grpc.StreamInterceptor(gl.Stream())}, opts...)...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	srv.RegisterService(echoDesc(got), struct{}{})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return srv, conn
}

func newGL(t *testing.T, lim *addrlimit.Limiter, opts ...grpclimit.Option) *grpclimit.Interceptor {
	t.Helper()
	gl, err := grpclimit.New(lim, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return gl
}

// chat opens a Chat stream and sends and receives n messages in turn; it
// returns how many came back and the error that ended the exchange.
func chat(t *testing.T, conn *grpc.ClientConn, ctx context.Context, n int) (grpc.ClientStream, int, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, chatMethod)
	if err != nil {
		return nil, 0, err
	}
	for k := range n {
		if err := s.SendMsg(wrapperspb.String("m" + strconv.Itoa(k))); err != nil && !errors.Is(err, io.EOF) {
			return s, k, err
		}
		if err := s.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			return s, k, err
		}
	}
	return s, n, nil
}

func decisionsFor(obs *observed, method string) int {
	n := 0
	for _, o := range obs.all() {
		if o.method == method {
			n++
		}
	}
	return n
}

// With WithStreamMessageCost, a bidirectional stream pays its opening and
// each message: with a burst of 5, the stream (1) and 4 messages pass, the
// 5th message is refused with ResourceExhausted, RetryInfo and the
// pushback trailer, and the stream ends.
func TestStreamMessageCostRefusesTheMessageOverTheBudget(t *testing.T) {
	lim, obs := newLimiter(t, 5, time.Hour)
	_, conn := serveEcho(t, newGL(t, lim, grpclimit.WithStreamMessageCost(chatMethod, 1)), nil)
	s, echoed, err := chat(t, conn, context.Background(), 10)
	wantCode(t, err, codes.ResourceExhausted, "message over the budget")
	if echoed != 4 {
		t.Errorf("%d messages echoed, want 4 (burst 5, 1 paid by the stream)", echoed)
	}
	trailer, info := pushback(t, err, s.Trailer())
	if info < 11*time.Minute || info > 12*time.Minute || trailer < info { // 5/hour: one token per 12 minutes
		t.Errorf("pushback %v, RetryInfo %v; want just under 12m", trailer, info)
	}
	if got := decisionsFor(obs, chatMethod); got != 6 {
		t.Errorf("%d decisions, want 6 (the stream and 5 messages)", got)
	}
	if st := lim.Stats(); st.Allowed != 5 || st.Limited != 1 {
		t.Errorf("Stats Allowed %d, Limited %d; want 5, 1", st.Allowed, st.Limited)
	}
}

// A handler that ignores a refused message's error and calls RecvMsg again
// gets the same refusal every time and no further message, although the
// client keeps sending.
func TestRefusedMessageStreamReceivesNothingMore(t *testing.T) {
	lim, _ := newLimiter(t, 2, time.Hour)
	got := make(chan recvAfterRefusal, 1)
	_, conn := serveEcho(t, newGL(t, lim, grpclimit.WithStreamMessageCost("/test.Echo/", 1)), got)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, uploadMethod)
	if err != nil {
		t.Fatal(err)
	}
	for k := range 6 { // the stream and 1 message pass; the 2nd is refused
		if err := s.SendMsg(wrapperspb.String("m" + strconv.Itoa(k))); err != nil {
			break // the server ended the stream
		}
	}
	r := <-got
	wantCode(t, r.first, codes.ResourceExhausted, "second message")
	for k, err := range r.later {
		if err != r.first {
			t.Errorf("RecvMsg %d after the refusal returned %v, want the same refusal", k+1, err)
		}
	}
	err = s.RecvMsg(new(wrapperspb.StringValue))
	wantCode(t, err, codes.ResourceExhausted, "stream's status")
	pushback(t, err, s.Trailer())
}

// The internal token exempts a stream and all its messages; without
// WithStreamMessageCost a stream is charged once, however many messages it
// carries.
func TestStreamMessagesExemptWithTokenAndFreeByDefault(t *testing.T) {
	tok, err := addrlimit.NewInternalToken(secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("token", func(t *testing.T) {
		lim, _ := newLimiter(t, 2, time.Hour, addrlimit.WithInternalToken(tok))
		_, conn := serveEcho(t, newGL(t, lim, grpclimit.WithStreamMessageCost(chatMethod, 1)), nil)
		if _, n, err := chat(t, conn, withMD("authorization", "Bearer "+secret), 10); err != nil || n != 10 {
			t.Fatalf("%d of 10 messages echoed, error %v", n, err)
		}
		if st := lim.Stats(); st.Exempt != 1 || st.Allowed != 0 || st.Limited != 0 {
			t.Errorf("Stats %+v, want 1 exempt stream and no message decided", st)
		}
	})
	t.Run("default", func(t *testing.T) {
		lim, obs := newLimiter(t, 2, time.Hour)
		_, conn := serveEcho(t, newGL(t, lim), nil)
		if _, n, err := chat(t, conn, context.Background(), 10); err != nil || n != 10 {
			t.Fatalf("%d of 10 messages echoed, error %v", n, err)
		}
		if got := decisionsFor(obs, chatMethod); got != 1 {
			t.Errorf("%d decisions, want 1 (messages not charged by default)", got)
		}
	})
}

// CheckServer names every rule that cannot apply to the registered
// services (a typo in a method or a service, a message cost on a method
// without a client stream) and only those; a server whose methods match
// every rule passes.
func TestCheckServerNamesRulesThatMatchNothing(t *testing.T) {
	lim, _ := newLimiter(t, 10, time.Hour, addrlimit.WithPolicy(addrlimit.Policy{Name: "list", Limits: []addrlimit.Limit{{Burst: 5, Interval: time.Hour / 5}}}))
	gl := newGL(t, lim,
		grpclimit.WithMethodPolicy("/grpc.health.v1.Health/Lst", "list"), // typo
		grpclimit.WithMethodCost("/grpc.health.v1.Helth/", 2),            // typo in the service
		grpclimit.WithStreamMessageCost(checkMethod, 1),                  // unary
		grpclimit.WithStreamMessageCost("/grpc.health.v1.Health/", 1),    // no client stream in the service
		grpclimit.WithMethodPolicy(listMethod, "list"),                   // fine
		grpclimit.WithStreamMessageCost(chatMethod, 1),                   // fine
		grpclimit.WithMethodCost("/test.Echo/", 2),                       // fine
	)
	srv, _ := serveEcho(t, gl, nil)
	err := gl.CheckServer(srv)
	if err == nil {
		t.Fatal("CheckServer passed a server that registers none of 4 rules")
	}
	msg := err.Error()
	for _, want := range []string{
		`"/grpc.health.v1.Health/Lst" (WithMethodPolicy): the server registers no such method`,
		`"/grpc.health.v1.Helth/" (WithMethodCost): the server registers no such service`,
		`"/grpc.health.v1.Health/Check" (WithStreamMessageCost): the method receives a client stream`,
		`"/grpc.health.v1.Health/" (WithStreamMessageCost): no method of the service receives`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q\ndoes not contain %q", msg, want)
		}
	}
	for _, fine := range []string{listMethod + `"`, chatMethod, `"/test.Echo/"`} {
		if strings.Contains(msg, fine) {
			t.Errorf("error %q names the matching rule %s", msg, fine)
		}
	}
	if !strings.HasPrefix(msg, "grpclimit: 4 rule(s)") {
		t.Errorf("error %q, want it to count 4 rules", msg)
	}

	ok := newGL(t, lim,
		grpclimit.WithMethodPolicy(listMethod, "list"),
		grpclimit.WithMethodCost("/grpc.health.v1.Health/", 2),
		grpclimit.WithStreamMessageCost("/test.Echo/", 1),
		grpclimit.WithStreamMessageCost(uploadMethod, 2))
	if err := ok.CheckServer(srv); err != nil {
		t.Errorf("CheckServer of matching rules: %v", err)
	}
	if err := newGL(t, lim).CheckServer(srv); err != nil {
		t.Errorf("CheckServer without rules: %v", err)
	}
	if err := ok.CheckServer(nil); err == nil {
		t.Error("CheckServer(nil) passed")
	}
	if err := new(grpclimit.Interceptor).CheckServer(srv); err == nil {
		t.Error("CheckServer on a zero Interceptor passed")
	}
}

// Without grpc.UnknownServiceHandler, grpc-go answers a call of an
// unregistered method with Unimplemented before any interceptor runs: the
// Limiter never sees it.
func TestUnknownMethodsUnseenWithoutUnknownServiceHandler(t *testing.T) {
	lim, obs := newLimiter(t, 2, time.Hour)
	_, conn := serveEcho(t, newGL(t, lim), nil)
	for range 5 {
		err := conn.Invoke(context.Background(), "/probe.Scanner/Scan", wrapperspb.String("x"), new(wrapperspb.StringValue))
		wantCode(t, err, codes.Unimplemented, "probe")
	}
	if n := len(obs.all()); n != 0 {
		t.Errorf("%d decisions for probes of unknown methods, want 0 (grpc-go refuses them first)", n)
	}
}

// With grpc.UnknownServiceHandler, grpc-go runs the stream interceptor for
// calls of unregistered services and methods (unary ones too), so probes
// are charged, refused over the budget with the pushback, and observed.
func TestUnknownServiceHandlerLimitsProbes(t *testing.T) {
	lim, obs := newLimiter(t, 3, time.Hour)
	unknown := grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		return status.Error(codes.Unimplemented, "unknown method")
	})
	_, conn := serveEcho(t, newGL(t, lim), nil, unknown)
	probes := []string{"/probe.Scanner/Scan", "/grpc.health.v1.Health/Admin", "/test.Echo/Debug"}
	for _, m := range probes {
		err := conn.Invoke(context.Background(), m, wrapperspb.String("x"), new(wrapperspb.StringValue))
		wantCode(t, err, codes.Unimplemented, "probe "+m+" within the budget")
		if got := decisionsFor(obs, m); got != 1 {
			t.Errorf("probe %s: %d decisions, want 1", m, got)
		}
	}
	var tr metadata.MD
	err := conn.Invoke(context.Background(), "/probe.Scanner/Other", wrapperspb.String("x"), new(wrapperspb.StringValue), grpc.Trailer(&tr))
	wantCode(t, err, codes.ResourceExhausted, "probe over the budget")
	pushback(t, err, tr)
	if st := lim.Stats(); st.Allowed != 3 || st.Limited != 1 {
		t.Errorf("Stats Allowed %d, Limited %d; want 3, 1", st.Allowed, st.Limited)
	}
}
