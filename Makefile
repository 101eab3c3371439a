# ds4ref — portable CPU reference for DeepSeek V4 Flash.
#
# Numerics depend on IEEE f32/f64 arithmetic done exactly as written: no
# -ffast-math, no FMA contraction.  Do not add flags that relax this; the
# golden vectors in vectors/ are the test.

CC      ?= cc
# -O3: the portable kernels vectorize better; the bits are the same at any
# level.  The AVX2, AVX-512 and NEON kernels are built whatever ARCH is and
# chosen at run time (quant/dot.c), so ARCH is for cross builds only; the
# bits are the same with every choice.
OPT     ?= -O3
ARCH    ?=
CFLAGS  ?= $(OPT) $(ARCH) -g
# -fPIC: the same objects make the static and the shared libraries.
# One source root (the top level: internal headers are named by their path
# from it, "quant/dot.h", "ref/model/model.h") and one include root for
# what is installed (include/).
# -Werror=switch: a switch over an enum without a default must name every
# value, so adding a block type (quant/types.h) fails the build at each
# kernel that does not handle it yet.
BASEFLAGS = -std=c11 -D_GNU_SOURCE -fPIC -Wall -Wextra -Wshadow -Wno-unused-parameter \
            -Werror=switch -ffp-contract=off -fno-fast-math -fopenmp -I. -Iinclude
LDLIBS  = -lpcre2-8 -lm
# What libds4check adds: libcurl, ds4ref-conform's HTTP client (check/conform/http.c).
CHECK_LDLIBS = -lcurl
BUILD  ?= build
# Where the binaries go; scripts/portability.sh gives each build of its matrix its own.
BINDIR ?= .

ALL_CFLAGS = $(BASEFLAGS) $(CFLAGS) $(EXTRA_CFLAGS)
ALL_LDFLAGS = -fopenmp $(LDFLAGS) $(EXTRA_LDFLAGS)

# Two libraries (docs/ARCHITECTURE.md), each a list of folders, lowest
# layer first.  libds4ref is the model and the formats it reads and writes
# (include/ds4ref.h); libds4check compares and drives other backends
# (include/ds4check.h) and is the only one that starts processes.
MODEL_DIRS = base quant $(addprefix ref/,text ckpt model format forward decode run api)
CHECK_DIRS = $(addprefix check/,diff conform api)
MODEL_SRC = $(sort $(wildcard $(patsubst %,%/*.c,$(MODEL_DIRS))))
CHECK_SRC = $(sort $(wildcard $(patsubst %,%/*.c,$(CHECK_DIRS))))
# ds4ref-conform's prompt corpus, compiled in from vectors/conform/*.txt.
CORPUS    = $(sort $(wildcard vectors/conform/*.txt))
MODEL_OBJ = $(patsubst %.c,$(BUILD)/%.o,$(MODEL_SRC))
CHECK_OBJ = $(patsubst %.c,$(BUILD)/%.o,$(CHECK_SRC)) $(BUILD)/check/conform/corpus_data.o
# Each object's headers, as the compiler saw them (-MMD; -MP: a header
# removed since is no error): touching a header rebuilds its users only.
DEPS      = $(wildcard $(patsubst %.c,$(BUILD)/%.d,$(MODEL_SRC) $(CHECK_SRC) \
              $(wildcard programs/*.c bench/*.c tests/*.c)))
LIBS      = $(BUILD)/libds4check.a $(BUILD)/libds4ref.a

TEST_SRC  = $(sort $(wildcard tests/test_*.c))
TEST_BIN  = $(patsubst tests/%.c,$(BUILD)/%,$(TEST_SRC))
TEST_COMMON = $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/testutil.c tests/malformed.c tests/greedy.c tests/official.c tests/refquant.c tests/script_drafter.c tests/chat_msgs.c tests/xzvocab.c))

# The installed programs, each named here: programs/NAME.c is ds4ref-NAME
# (programs/ds4ref.c is ds4ref), and bench/bench.c is ds4ref-bench.
# MODEL_PROGRAMS link libds4ref only, CHECK_PROGRAMS libds4check too;
# ds4ref-llama (ds4ref-conform's llama.cpp backend) links neither: it loads
# llama.cpp's prebuilt libraries at run time.  ds4ref-server is made of
# programs/server*.c and links libmicrohttpd and jansson too.
MODEL_PROGRAMS = $(addprefix $(BINDIR)/,ds4ref ds4ref-mkmodel ds4ref-gguf)
CHECK_PROGRAMS = $(addprefix $(BINDIR)/,ds4ref-diff ds4ref-conform)
PROGRAMS  = $(MODEL_PROGRAMS) $(CHECK_PROGRAMS) $(BINDIR)/ds4ref-bench $(BINDIR)/ds4ref-llama \
            $(BINDIR)/ds4ref-server
TOOLS     = $(PROGRAMS) $(BINDIR)/ds4_test

DEFAULT_MODEL = models/tiny.gguf
# ds4ref-conform's default: a tiny model whose MTP head drafts what it decodes.
SPEC_MODEL = models/tiny-spec.gguf

.PHONY: all test check clean valgrind vectors bench peers
all: $(TOOLS) $(TEST_BIN) $(DEFAULT_MODEL) $(SPEC_MODEL) $(BUILD)/libds4ref.so \
     $(BUILD)/libds4check.so $(BUILD)/conform-backend

$(BUILD)/%.o: %.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(KERNEL_FLAGS) -MMD -MP -c $< -o $@
-include $(DEPS)

$(BUILD)/gen/corpus_data.c: $(CORPUS) scripts/embed_prompts.sh
	@mkdir -p $(dir $@)
	scripts/embed_prompts.sh $@ $(CORPUS)
$(BUILD)/check/conform/corpus_data.o: $(BUILD)/gen/corpus_data.c check/conform/corpus.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# The kernel variants (quant/dot_kern.h): each file is compiled for its own
# instruction set, and quant/dot.c runs the best one the CPU has.  Every
# variant gives the same bits, so the default build is as fast as the CPU
# allows without being tied to it; ARCH= is for cross builds.
TARGET_MACHINE := $(shell $(CC) -dumpmachine)
ifneq ($(filter x86_64%,$(TARGET_MACHINE)),)
$(BUILD)/quant/dot_avx2.o: KERNEL_FLAGS = -mavx2 -mfma -mf16c
$(BUILD)/quant/dot_avx512.o: KERNEL_FLAGS = -mavx512f -mavx512dq -mavx2 -mfma -mf16c
endif

# Each shared library exports its public header's functions only.
# libds4check.so carries the parts of the model it uses, so that it needs
# no internal symbol of libds4ref.so: its API passes paths, never handles.
$(BUILD)/libds4ref.so: $(MODEL_OBJ) ref/api/ds4ref.map
	$(CC) -shared $(ALL_LDFLAGS) -Wl,-soname,libds4ref.so.1 -Wl,--version-script=ref/api/ds4ref.map \
	    -o $@ $(MODEL_OBJ) $(LDLIBS)
$(BUILD)/libds4check.so: $(CHECK_OBJ) $(BUILD)/libds4ref.a check/api/ds4check.map
	$(CC) -shared $(ALL_LDFLAGS) -Wl,-soname,libds4check.so.1 -Wl,--version-script=check/api/ds4check.map \
	    -o $@ $(CHECK_OBJ) $(BUILD)/libds4ref.a $(CHECK_LDLIBS) $(LDLIBS)

$(BUILD)/libds4ref.a: $(MODEL_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/libds4check.a: $(CHECK_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BINDIR)/ds4ref: $(BUILD)/programs/ds4ref.o $(BUILD)/libds4ref.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)
$(BINDIR)/ds4ref-mkmodel $(BINDIR)/ds4ref-gguf: $(BINDIR)/ds4ref-%: $(BUILD)/programs/%.o $(BUILD)/libds4ref.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)
$(CHECK_PROGRAMS): $(BINDIR)/ds4ref-%: $(BUILD)/programs/%.o $(LIBS)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CHECK_LDLIBS) $(LDLIBS)
SERVER_OBJ = $(addprefix $(BUILD)/programs/,server.o server_request.o server_sched.o \
             server_metrics.o)
$(BINDIR)/ds4ref-server: $(SERVER_OBJ) $(BUILD)/libds4ref.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ -lmicrohttpd -ljansson -lpthread $(LDLIBS)
$(BINDIR)/ds4ref-llama: $(BUILD)/programs/llama.o
	$(CC) $(ALL_LDFLAGS) -o $@ $^ -ldl -lm
# The benchmark measures what the API hides (kernels, engine, KV state): the
# one program that includes internal headers (scripts/layers.sh).
$(BINDIR)/ds4ref-bench: $(BUILD)/bench/bench.o $(BUILD)/libds4ref.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS) -ldl

DS4T_OBJ = $(patsubst %.c,$(BUILD)/%.o,$(sort $(wildcard tests/ds4t_*.c)))

$(BINDIR)/ds4_test: $(BUILD)/tests/ds4_test.o $(DS4T_OBJ) $(BUILD)/tests/greedy.o $(BUILD)/tests/script_drafter.o \
                    $(LIBS)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CHECK_LDLIBS) $(LDLIBS)

# The tests' objects are kept (not removed as intermediates), so that a
# change relinks the tests instead of compiling every one again.
.SECONDARY: $(patsubst tests/%.c,$(BUILD)/tests/%.o,$(TEST_SRC))
$(BUILD)/test_%: $(BUILD)/tests/test_%.o $(TEST_COMMON) $(LIBS)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ -lcmocka $(CHECK_LDLIBS) $(LDLIBS)

# test_ops checks the matrix kernels against OpenBLAS's cblas_dgemm: the only
# binary that links OpenBLAS (the library never does).
$(BUILD)/test_ops: $(BUILD)/tests/test_ops.o $(TEST_COMMON) $(LIBS)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ -lcmocka -lopenblas $(CHECK_LDLIBS) $(LDLIBS)

# The official-model oracle (vectors/official/README.md) is committed
# xz-compressed; every build of the tests decompresses it into
# $(BUILD)/official and checks it against its SHA256SUMS, and the tests read
# it from there (testutil.c is told where).
OFFICIAL_XZ = $(sort $(wildcard vectors/official/*.xz vectors/official/*/*.xz))
OFFICIAL    = $(patsubst vectors/official/%.xz,$(BUILD)/official/%,$(OFFICIAL_XZ))
OFFICIAL_OK = $(BUILD)/official/.checked
$(BUILD)/official/%: vectors/official/%.xz
	@mkdir -p $(dir $@)
	@xz -dc $< > $@.tmp && mv $@.tmp $@
$(OFFICIAL_OK): $(OFFICIAL) vectors/official/SHA256SUMS
	cd $(BUILD)/official && sha256sum --quiet -c $(abspath vectors/official/SHA256SUMS)
	@touch $@
$(TEST_BIN): | $(OFFICIAL_OK)
$(BUILD)/tests/testutil.o: ALL_CFLAGS += -DDS4REF_OFFICIAL_DIR='"$(BUILD)/official"'

# What ds4ref reads of a checkpoint, for make peers to compare with what the
# safetensors library wrote (tests/ckpt_dump.c).
$(BUILD)/ckpt-dump: $(BUILD)/tests/ckpt_dump.o $(BUILD)/libds4ref.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

# ds4ref-conform's test backend (tests/conform.sh): the public API only.
$(BUILD)/conform-backend: $(BUILD)/tests/conform_backend.o $(BUILD)/libds4ref.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

models/tiny.gguf: $(BINDIR)/ds4ref-mkmodel
	@mkdir -p models
	$(BINDIR)/ds4ref-mkmodel --config tiny --types ds4 --seed 1 -o $@

$(SPEC_MODEL): $(BINDIR)/ds4ref-mkmodel
	@mkdir -p models
	$(BINDIR)/ds4ref-mkmodel --config tiny-spec --types ds4 --seed 1 -o $@

test: all
	@tests/run_tests.sh $(BUILD)

# The inner loop: unit tests, layering and symbols, ds4_test on the goldens,
# the command lines (README: a few minutes on 2 cores).
check: all
	@tests/run_tests.sh --quick $(BUILD)

vectors: ds4ref ds4ref-mkmodel
	scripts/make_vectors.sh

# Throughput (docs/PERFORMANCE.md): decode/prefill CSV on the default tiny
# model and the matrix kernels.  bench-fullwidth also makes the 2.4 GB
# fullwidth synthetic model (real per-layer dimensions) once and times it
# layer by layer.  Build with ARCH=-march=native for representative numbers.
FULLWIDTH_MODEL = models/fullwidth.gguf
FULLDEPTH_MODEL = models/fulldepth.gguf
# ds4ref-conform against real peers (llama.cpp's prebuilt CPU backend),
# installed when they can be and skipped, with the reason, when not:
# heavy, so not part of make test.
peers: all $(BUILD)/ckpt-dump
	scripts/peers.sh $(BUILD)

# tests/conform.sh with the self-check on the full default matrix (336 cells)
# and every seed bug at depth 2 too; make test runs a sample (docs/CONFORM.md).
.PHONY: conform-full
conform-full: all
	tests/conform.sh --full $(BUILD)

bench: $(BINDIR)/ds4ref-bench $(DEFAULT_MODEL)
	$(BINDIR)/ds4ref-bench -m $(DEFAULT_MODEL) -p 64,256 -n 32
	$(BINDIR)/ds4ref-bench --kernels --kernel-rows 1024

$(FULLWIDTH_MODEL) $(FULLDEPTH_MODEL): models/%.gguf: $(BINDIR)/ds4ref-mkmodel
	@mkdir -p models
	$(BINDIR)/ds4ref-mkmodel --config $* --types ds4 --no-mtp -o $@

# llama.cpp's side of the comparison (bench/compare.sh): a timing program
# that loads the prebuilt libraries with dlopen, so it builds without them;
# and the memory bandwidth probe of the decode roofline (bench/measure.sh).
$(BUILD)/bench/llama_time: bench/llama_time.c programs/llama_api.h
	@mkdir -p $(dir $@)
	$(CC) -O2 -std=c11 -Wall -Wextra -o $@ $< -ldl
$(BUILD)/bench/bandwidth: bench/bandwidth.c
	@mkdir -p $(dir $@)
	$(CC) -O3 -march=native -std=c11 -Wall -Wextra -fopenmp -o $@ $<

# bench-long: an 8192-token prompt on fullwidth, where the indexer chooses
# 512 of up to 2048 compressed rows and the ratio-128 layer attends 64
# compressed rows: prefill tokens/s, decode tokens/s at that depth, KV
# bytes and RSS.  bench-fulldepth: the real 43 layers end to end (about
# 13 GB of synthetic model, made once).  bench-fulldepth-ckpt: that model
# and its checkpoint in the release's layout (18 GB more, made once from
# it), side by side (docs/PERFORMANCE.md).
.PHONY: bench-fullwidth bench-long bench-fulldepth bench-fulldepth-ckpt
bench-fullwidth: $(BINDIR)/ds4ref-bench $(FULLWIDTH_MODEL)
	$(BINDIR)/ds4ref-bench -m $(FULLWIDTH_MODEL) -p 64 -n 16 --layers
bench-long: $(BINDIR)/ds4ref-bench $(FULLWIDTH_MODEL)
	$(BINDIR)/ds4ref-bench -m $(FULLWIDTH_MODEL) -p 8192 -n 16 --warm
bench-fulldepth: $(BINDIR)/ds4ref-bench $(FULLDEPTH_MODEL)
	$(BINDIR)/ds4ref-bench -m $(FULLDEPTH_MODEL) -p 256 -n 8 --warm --layers
models/fulldepth-ckpt/config.json: $(FULLDEPTH_MODEL) $(BINDIR)/ds4ref-gguf
	$(BINDIR)/ds4ref-gguf checkpoint $(FULLDEPTH_MODEL) models/fulldepth-ckpt
bench-fulldepth-ckpt: $(BINDIR)/ds4ref-bench models/fulldepth-ckpt/config.json
	$(BINDIR)/ds4ref-bench -m $(FULLDEPTH_MODEL) -p 256 -n 8 --warm
	$(BINDIR)/ds4ref-bench -m models/fulldepth-ckpt -p 256 -n 8 --warm --no-header

# Rebuild with gcc/clang x -O0/-O2/-O3 x native/generic (and aarch64 under
# qemu when installed) and require every golden of vectors/ bit for bit; see
# docs/PORTABILITY.md.  portability-short is the subset that make test runs.
.PHONY: portability portability-short
portability:
	scripts/portability.sh full
portability-short:
	scripts/portability.sh short

# Sanitizers (docs/RELIABILITY.md): the whole tree built with clang and ASan
# (with LeakSanitizer), UBSan, or both in one build (sanitize, what make test
# runs: one pass instead of two), then `make test` on it.  Each builds in
# $(BUILD)/asan, $(BUILD)/ubsan or $(BUILD)/sanitize, a mirror whose sources
# are links to these, with its own objects, binaries and models: nothing of
# the default build is touched.  Its conform run has the default build's
# programs as backends (tests/conform.sh), so that build comes first.  Fuzzing: tests/fuzz/fuzz.sh (libFuzzer); CI
# runs fuzz-smoke.
SAN_CC ?= clang
FUZZ_SECONDS ?= 3600
FUZZ_SMOKE_SECONDS ?= 10
asan: SAN_FLAGS = -fsanitize=address -fno-omit-frame-pointer
ubsan: SAN_FLAGS = -fsanitize=undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
sanitize: SAN_FLAGS = -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
.PHONY: asan ubsan sanitize fuzz fuzz-smoke
asan ubsan sanitize: all
	@mkdir -p $(BUILD)/$@
	@for f in Makefile README.md ds4ref.pc.in ds4check.pc.in .ci docs examples include base quant ref check programs bench scripts \
	         tests vectors; do \
	    if [ -e $$f ]; then ln -sfn $(CURDIR)/$$f $(BUILD)/$@/$$f; fi; done
	@if [ -e ../shared ]; then ln -sfn $(abspath ../shared) $(BUILD)/shared; fi
	DS4REF_SANITIZER=$@ DS4REF_PLAIN_BUILD=$(abspath $(BUILD)) DS4REF_PLAIN_BIN=$(abspath $(BINDIR)) \
	    $(MAKE) -C $(BUILD)/$@ CC=$(SAN_CC) OPT=-O2 BUILD=build BINDIR=. \
	    EXTRA_CFLAGS="$(SAN_FLAGS)" EXTRA_LDFLAGS="$(SAN_FLAGS)" test
fuzz:
	FUZZ_BUILD=$(BUILD)/fuzz tests/fuzz/fuzz.sh long $(FUZZ_SECONDS)
fuzz-smoke:
	FUZZ_BUILD=$(BUILD)/fuzz tests/fuzz/fuzz.sh smoke $(FUZZ_SMOKE_SECONDS)

# The Python package's tests (python/, README "Python"), also run by make test;
# tests/python.sh picks an interpreter with NumPy and pytest.
.PHONY: python-test
python-test: all
	DS4REF_BIN_DIR=$(abspath $(BINDIR)) tests/python.sh $(BUILD)

# Mutation check (scripts/mutants.sh): each one-line mutation of the math
# sources listed in tests/mutants.txt, applied to a scratch copy of the tree
# in $(BUILD)/mutants, must make a fast test fail; prints the kill table.
.PHONY: mutants mutants-quick
mutants:
	scripts/mutants.sh $(BUILD)/mutants
# The same verdicts for make test: each mutant's tests fastest first, up to
# the first that kills it.
mutants-quick:
	scripts/mutants.sh --first-kill $(BUILD)/mutants

# make install PREFIX=/usr/local: the two headers, libraries and pkg-config
# files, the programs, and the synthetic models they default to
# (PREFIX/share/ds4ref/models, programs/models.h).  ds4_test is not installed: it runs from the
# source tree (vectors/, ../shared), and its name would be too generic in a
# bin/.
PREFIX ?= /usr/local
VERSION = $(shell sed -n 's/^#define DS4REF_VERSION "\(.*\)"/\1/p' base/version.h)
.PHONY: install examples
install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/ds4ref.h include/ds4check.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libds4ref.a $(BUILD)/libds4check.a $(DESTDIR)$(PREFIX)/lib/
	for l in ds4ref ds4check; do \
	    install -m 755 $(BUILD)/lib$$l.so $(DESTDIR)$(PREFIX)/lib/lib$$l.so.1 && \
	    ln -sf lib$$l.so.1 $(DESTDIR)$(PREFIX)/lib/lib$$l.so && \
	    sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' $$l.pc.in \
	        > $(DESTDIR)$(PREFIX)/lib/pkgconfig/$$l.pc || exit 1; done
	install -m 755 $(PROGRAMS) $(DESTDIR)$(PREFIX)/bin/
	install -d $(DESTDIR)$(PREFIX)/share/ds4ref/models
	install -m 644 $(DEFAULT_MODEL) $(DEFAULT_MODEL:.gguf=-mtp.gguf) $(SPEC_MODEL) \
	    $(SPEC_MODEL:.gguf=-mtp.gguf) $(DESTDIR)$(PREFIX)/share/ds4ref/models/

# The examples, built against this tree's library.
examples: $(BUILD)/examples/compare_head
$(BUILD)/examples/%: examples/%.c $(BUILD)/libds4ref.a include/ds4ref.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(BUILD)/libds4ref.a $(LDLIBS)

clean:
	rm -rf $(BUILD) $(TOOLS) models
