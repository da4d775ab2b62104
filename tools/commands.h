// The sluice subcommands. Each lives in its own tools/cmd_<name>.cpp and is listed in main.cpp.
// A command takes the arguments after its name (argv[0] is "sluice <name>") and returns the exit
// code; sluice::Error escaping a command becomes one line on stderr and exit code 1.
#pragma once

namespace sluice::tools {

int cmd_bench(int argc, char** argv);          // dispatches to the three below
int cmd_bench_io(int argc, char** argv);       // sluice bench io
int cmd_bench_kernels(int argc, char** argv);  // sluice bench kernels
int cmd_bench_model(int argc, char** argv);    // sluice bench -m MODEL
int cmd_chat(int argc, char** argv);
int cmd_demo(int argc, char** argv);
int cmd_doctor(int argc, char** argv);
int cmd_index(int argc, char** argv);
int cmd_inspect(int argc, char** argv);
int cmd_perplexity(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_synth(int argc, char** argv);
int cmd_tune(int argc, char** argv);

}  // namespace sluice::tools
