package redisstore_test

import "runtime"

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
