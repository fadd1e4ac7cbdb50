package redisstore_test

import (
	"log"
	"net/http"
	"os"
	"time"

	"github.com/addrlimit/addrlimit"
	"github.com/addrlimit/addrlimit/redisstore"
	"github.com/redis/go-redis/v9"
)

// A fleet of instances sharing one budget per client address. During a Redis
// outage each instance falls back to its own in-memory buckets (FailLocal).
func Example() {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  "localhost:6379",
		ContextTimeoutEnabled: true, // required: lets the store's timeout bound every call
	})
	defer rdb.Close()

	store, err := redisstore.New(rdb, redisstore.WithKeyPrefix("api:ratelimit:"), redisstore.WithTimeout(50*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	tok, err := addrlimit.NewInternalToken(os.Getenv("INTERNAL_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	lim, err := addrlimit.New(300, time.Minute,
		addrlimit.WithStore(store),
		addrlimit.WithStoreFailure(addrlimit.FailLocal), // the default, spelled out
		addrlimit.WithInternalToken(tok),                // exempt requests never reach Redis
	)
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe(":8080", lim.Handler(http.NotFoundHandler())))
}
