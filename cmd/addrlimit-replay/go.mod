module github.com/addrlimit/addrlimit/cmd/addrlimit-replay

go 1.26.0

require github.com/addrlimit/addrlimit v0.1.0

replace github.com/addrlimit/addrlimit => ../../
