package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"strconv"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/grpclimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A health server whose Check calls are limited to 2 per hour per client
// address, and whose List calls cost 2 tokens of a separate policy; the
// internal token passes unlimited. Observers see the method as the route.
func Example() {
	tok, err := addrlimit.NewInternalToken("example-internal-secret-0123456789")
	if err != nil {
		log.Fatal(err)
	}
	lim, err := addrlimit.New(2, time.Hour,
		addrlimit.WithInternalToken(tok),
		addrlimit.WithObserver(func(_ context.Context, d addrlimit.Decision) {
			if d.Denied() {
				fmt.Println("observed:", d.Outcome, d.Route)
			}
		}),
		addrlimit.WithPolicy(addrlimit.Policy{Name: "list", Limits: []addrlimit.Limit{{Burst: 10, Interval: time.Hour / 10}}}))
	if err != nil {
		log.Fatal(err)
	}
	gl, err := grpclimit.New(lim,
		grpclimit.WithMethodPolicy("/grpc.health.v1.Health/List", "list"),
		grpclimit.WithMethodCost("/grpc.health.v1.Health/List", 2))
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(gl.Unary()), grpc.StreamInterceptor(gl.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	if err := gl.CheckServer(srv); err != nil { // a misspelt method in a rule stops here
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	for range 3 {
		var trailer metadata.MD
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
		st := status.Convert(err)
		fmt.Println(st.Code())
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.RetryInfo); ok {
				ms, _ := strconv.Atoi(trailer.Get(grpclimit.PushbackTrailer)[0])
				fmt.Println("retry in", info.RetryDelay.AsDuration().Round(time.Minute),
					"pushback", (time.Duration(ms) * time.Millisecond).Round(time.Minute))
			}
		}
	}
	internal := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer example-internal-secret-0123456789")
	_, err = client.Check(internal, &healthpb.HealthCheckRequest{})
	fmt.Println("internal:", status.Code(err))
	_, err = client.List(context.Background(), &healthpb.HealthListRequest{})
	fmt.Println("list:", status.Code(err))
	// Output:
	// OK
	// OK
	// observed: limited /grpc.health.v1.Health/Check
	// ResourceExhausted
	// retry in 30m0s pushback 30m0s
	// internal: OK
	// list: OK
}

// CheckServer, run once the services are registered, names the rules that
// match no method of the server: here a misspelt method, which would
// otherwise leave List on the default policy.
func ExampleInterceptor_CheckServer() {
	lim, err := addrlimit.New(100, time.Minute, addrlimit.WithPolicy(addrlimit.Policy{Name: "list", Limits: []addrlimit.Limit{{Burst: 10, Interval: time.Minute / 10}}}))
	if err != nil {
		log.Fatal(err)
	}
	gl, err := grpclimit.New(lim, grpclimit.WithMethodPolicy("/grpc.health.v1.Health/Lsit", "list"))
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(gl.Unary()), grpc.StreamInterceptor(gl.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	fmt.Println(gl.CheckServer(srv))
	// Output:
	// grpclimit: 1 rule(s) cannot apply to the server's methods: "/grpc.health.v1.Health/Lsit" (WithMethodPolicy): the server registers no such method
}
