module github.com/addrlimit/addrlimit/examples/proxies

go 1.26.0

require github.com/addrlimit/addrlimit v0.1.0

require github.com/pires/go-proxyproto v0.15.0

replace github.com/addrlimit/addrlimit => ../../
