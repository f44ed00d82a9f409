# ShardChat: `make run` starts the app, `make test` runs the whole suite.
# Both create .venv and install everything on first use, and reuse it after.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
WHEELS := .cache/wheels
LLAMA_VERSION := 0.3.36
# Every patch installer/llama_wheel.py applies (the same glob): the wheel is rebuilt when one changes.
LLAMA_PATCHES := $(wildcard installer/patches/llama-cpp-python-$(LLAMA_VERSION)-*.patch)
LLAMA_WHEEL_STAMP := $(WHEELS)/.llama-cpp-python-$(LLAMA_VERSION)-backend-dl
INSTALLED := $(VENV)/.installed
INSTALLER_TOOLS := $(VENV)/.installer-tools
# Debian's cross-compiler, NSIS and Wine: the Windows build and its tests (make windows)
WINDOWS_TOOLS := $(VENV)/.windows-tools
# The system's part of a target, each a stamp whose rule checks the packages on every run
# (tests/make_prerequisites.py checks that each target names the ones it needs).
LAVAPIPE := $(VENV)/.lavapipe
SSHD := $(VENV)/.sshd
LLAMA_SRC := .cache/llama-src/llama_cpp_python-$(LLAMA_VERSION)/vendor/llama.cpp
FIT_PARAMS := .cache/fit-params/llama-fit-params

# One llama.cpp build for every machine, as llama.cpp's own releases are built: each backend
# a module loaded at run time (engine/llama/backends.py loads them from llama_cpp/lib), the
# CPU backend once per x86 level (the best-scoring one for this CPU wins), Vulkan for any
# GPU without a toolkit, RPC. The patches install the modules beside libggml and make a CPU
# variant score 0 where the OS has not enabled the register state it needs (XCR0, and
# Linux's AMX permission): llama.cpp's score read CPUID alone, so on a virtual machine whose
# CPUID shows AMX without its tile state the sapphirerapids variant won and died of SIGILL.
LLAMA_CMAKE_ARGS := -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_NATIVE=OFF \
	-DGGML_VULKAN=ON -DGGML_RPC=ON
LLAMA_BUILD := .cache/llama-build
LLAMA_SDIST := .cache/llama-src/llama_cpp_python-$(LLAMA_VERSION).tar.gz

# The portable single-library build ShardChat shipped before the loadable backends: only
# bench/backend_build.py's side-by-side comparison builds it (make bench-build).
PORTABLE_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
	-DGGML_F16C=ON -DGGML_BMI2=ON
PORTABLE_VENV := .venv-portable
PORTABLE_WHEELS := .cache/wheels-portable
PORTABLE_WHEEL_STAMP := $(PORTABLE_WHEELS)/.llama-cpp-python-$(LLAMA_VERSION)-portable
PORTABLE_INSTALLED := $(PORTABLE_VENV)/.installed

.PHONY: run test test-gpu lint format docs bench bench-build screenshots clean distclean
.PHONY: installer installer-test installer-clean windows test-windows

# Where NVML or nvidia-smi shows an NVIDIA GPU and the CUDA module is missing, it is built
# first (make cuda); everywhere else the app starts at once, on Vulkan or the CPU.
run: $(INSTALLED)
	@archs=$$($(PY) installer/cuda_module.py detect 2>/dev/null || true); \
	if [ -n "$$archs" ] && [ -z "$$($(PY) -c "$(HAS_CUDA_MODULE)")" ]; then \
		echo "NVIDIA GPU found (compute capability $$archs): building llama.cpp's CUDA module once"; \
		$(MAKE) cuda CUDA_ARCHS="$$archs"; \
	fi
	$(VENV)/bin/shardchat gui

# ggml's CUDA module for the installed build (installer/cuda_module.py): for this machine's
# NVIDIA GPUs, or for CUDA_ARCHS="86;89;120". The toolkit is the system's, completed from
# PyPI's nvidia-* packages (cuBLAS; nvcc too where there is none); about 20 minutes per
# architecture on 2 cores. The module lands in llama_cpp/lib, where the engine loads it.
CUDA_ARCHS ?=
HAS_CUDA_MODULE := import llama_cpp, pathlib; lib = pathlib.Path(llama_cpp.__file__).parent / 'lib'; \
	print(*lib.glob('libggml-cuda*'))

.PHONY: cuda
cuda: $(INSTALLED)
	@$(call apt_ensure,cmake:cmake patchelf:patchelf g++:g++)
	$(PY) installer/cuda_module.py build $(if $(CUDA_ARCHS),--archs "$(CUDA_ARCHS)")

# What bench/gpu_check.sh carries to a lent NVIDIA machine (Hopper, sm_90): ggml's CUDA module
# built from the same patched sources, beside this build's llama_cpp package and the wheels
# the engine needs there, packed into .gpu/ under 64 MiB (bench/gpu_bundle.py).
CUDA_SM90 := .cache/cuda-sm90/libggml-cuda.so

.PHONY: gpu-bundle
gpu-bundle: $(CUDA_SM90)
	$(PY) bench/gpu_bundle.py --cuda $(CUDA_SM90) --out .gpu

$(CUDA_SM90): $(LLAMA_PATCHES) installer/cuda_module.py | $(INSTALLED)
	@$(call apt_ensure,cmake:cmake patchelf:patchelf g++:g++)
	$(PY) installer/cuda_module.py build --archs 90 --into $(@D)

# The suite runs on two pytest-xdist workers, a test file each at a time (module fixtures stay
# one per file), then the tests marked serial alone: they measure this machine, and a test
# running beside them would be measured too. Two, not one per core: most tests load a
# model on every core, so more workers only queue. A crashed worker ends the run (no restart):
# xdist once hung replacing one.
TEST_WORKERS ?= 2

# The lent-computer tests start OpenSSH's server on a loopback port (tests/app/test_devices_cli.py).
# Mesa's software Vulkan device (lavapipe) is installed too: with a Vulkan loader and no
# driver at all, llama.cpp's Vulkan module fails to start instead of finding no GPU, and
# the suite checks what a machine with a Vulkan driver and no GPU says.
test: $(INSTALLED) $(LAVAPIPE) $(SSHD)
	$(PY) tests/make_prerequisites.py
	$(VENV)/bin/ruff check --no-cache .
	$(VENV)/bin/ruff format --no-cache --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(MKDOCS_BUILD)
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -m "not gpu and not serial" -n $(TEST_WORKERS) --dist loadfile --max-worker-restart 0
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -m "serial and not gpu"

# The GPU tier (tests/gpu) on a real Vulkan device: Mesa's software GPU (lavapipe) where
# there is no other, with the same install as `make test`. llama.cpp skips CPU-type Vulkan
# devices unless told (GGML_VK_VISIBLE_DEVICES).
GPU_ENV := GGML_VK_VISIBLE_DEVICES=0 GGML_VK_DISABLE_F16=1 GGML_VK_DISABLE_COOPMAT=1

test-gpu: $(INSTALLED) $(LAVAPIPE) $(FIT_PARAMS)
	QT_QPA_PLATFORM=offscreen $(GPU_ENV) FIT_PARAMS_TOOL=$(CURDIR)/$(FIT_PARAMS) \
		$(PY) -m pytest -m gpu tests/gpu -v

# The stamps' rules run every time (FORCE): a package removed since the last run is installed
# again, as on a fresh machine, and the check costs a few milliseconds.
$(LAVAPIPE): FORCE | $(PY)
	@$(call apt_ensure,vulkaninfo:vulkan-tools)
	@test -e /usr/share/vulkan/icd.d/lvp_icd.x86_64.json -o -e /usr/share/vulkan/icd.d/lvp_icd.json || \
		{ apt-get update && apt-get install -y --no-install-recommends mesa-vulkan-drivers libvulkan1; }
	@touch $@

$(SSHD): FORCE | $(PY)
	@$(call apt_ensure,sshd:openssh-server ssh:openssh-client)
	@touch $@

.PHONY: FORCE
FORCE:

# The sdist of the llama-cpp-python release, unpacked: the wheel, llama-server and the
# fit-params tool are all built from it.
$(LLAMA_SRC)/CMakeLists.txt: | $(PY)
	mkdir -p $(dir $(LLAMA_SDIST))
	test -f $(LLAMA_SDIST) || $(PIP) download --quiet --no-deps --no-binary :all: \
		-d $(dir $(LLAMA_SDIST)) llama-cpp-python==$(LLAMA_VERSION)
	tar -xzf $(LLAMA_SDIST) -C $(dir $(LLAMA_SDIST))
	touch $@

# llama.cpp's own --fit as its tool prints it (tools/fit-params), for tests/gpu/test_fit_params.py:
# common/fit.cpp of the vendored llama.cpp, unchanged, behind tests/gpu/fit_params/main.cpp
# (the tool's printing without common/'s argument parser), linked to the installed libllama.
$(FIT_PARAMS): tests/gpu/fit_params/main.cpp $(LLAMA_SRC)/CMakeLists.txt $(INSTALLED)
	@$(call apt_ensure,g++:g++)
	mkdir -p $(@D)
	lib=$$($(PY) -c 'import llama_cpp, pathlib; print(pathlib.Path(llama_cpp.__file__).parent / "lib")') && \
	g++ -std=c++17 -O1 -I$(LLAMA_SRC)/common -I$(LLAMA_SRC)/include -I$(LLAMA_SRC)/ggml/include \
		-I$(LLAMA_SRC)/vendor tests/gpu/fit_params/main.cpp $(LLAMA_SRC)/common/fit.cpp \
		$(LLAMA_SRC)/common/log.cpp $(LLAMA_SRC)/common/json.cpp -DGGML_MODULE_DIR="\"$$lib\"" \
		-L$$lib -lllama -lggml -lggml-base -Wl,-rpath,$$lib -o $@

lint: $(INSTALLED)
	$(VENV)/bin/ruff check --no-cache .
	$(VENV)/bin/ruff format --no-cache --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache --no-logo

format: $(INSTALLED)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The documentation site (mkdocs.yml, docs/), built strictly: a broken link, a missing page,
# an unknown anchor or a page left out of the nav fails it. `make test` runs the same build.
# NO_MKDOCS_2_WARNING silences Material's end-of-life banner, which is not a warning of ours.
MKDOCS_BUILD := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir .cache/site

docs: $(INSTALLED)
	$(MKDOCS_BUILD)

bench: $(INSTALLED)
	$(PY) bench/runtime_overhead.py

# The README's pictures, rendered offscreen from the real window (runs a fast profile).
screenshots: $(INSTALLED)
	QT_QPA_PLATFORM=offscreen $(PY) assets/screenshots.py

# The double-click installers (installer/README.md): the PyInstaller bundle and, on Linux,
# dist/shardchat_VERSION_ARCH.deb and dist/shardchat-VERSION-linux-ARCH.tar.gz.
installer: $(INSTALLER_TOOLS)
	@$(call apt_ensure,fakeroot:fakeroot readelf:binutils)
	$(PY) installer/build.py

# Build the installers, then check that build (tests/installer): the unpacked .deb's
# --selftest in a clean environment, lintian, first and returning launch, the archive.
# The build machine gets the xcb utility libraries first, as every desktop and GitHub's
# runners have them: the bundle must still leave them to the system (installer/
# system_libraries.py). The selftests run on lavapipe's Vulkan device and on the CPU.
XCB_UTILS := libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0 libxcb-cursor0 \
	libxcb-randr0 libxcb-shape0 libxcb-xinerama0 libxcb-xkb1 libxkbcommon-x11-0

installer-test: $(INSTALLER_TOOLS) $(LAVAPIPE)
	@$(call apt_ensure,fakeroot:fakeroot readelf:binutils lintian:lintian unshare:util-linux)
	@dpkg -s $(XCB_UTILS) >/dev/null 2>&1 || \
		{ apt-get update && apt-get install -y --no-install-recommends $(XCB_UTILS); }
	$(PY) installer/build.py
	SHARDCHAT_INSTALLER_TEST=reuse QT_QPA_PLATFORM=offscreen \
		$(PY) -m pytest -m installer tests/installer -v

# The Windows installer, built here (installer/windows/build_windows.py): llama.cpp cross-
# compiled with mingw-w64 from the wheel's patched sources (cached per user in
# ~/.cache/shardchat-build/windows under a key of its inputs, so every clone reuses it;
# about 22 minutes on 2 cores the first time), python.org's embeddable CPython, PyPI's
# win_amd64 wheels, NSIS. dist/ShardChat-VERSION-windows-x64-setup.exe.
WINDOWS_PACKAGES := mingw-w64 nsis wine wine64 xvfb procps cmake ninja-build glslc glslang-tools \
	libvulkan-dev spirv-headers patch

windows: $(INSTALLER_TOOLS) $(WINDOWS_TOOLS)
	$(PY) installer/windows/build_windows.py

# That setup.exe under Wine, in a fresh prefix per run (tests/windows): installed silently,
# then the command line, the API server, a summary, a stopped terminal chat, the window and
# the uninstaller, as a Windows user would meet them. The GPU check runs on lavapipe.
test-windows: windows $(INSTALLER_TOOLS) $(WINDOWS_TOOLS) $(LAVAPIPE)
	SHARDCHAT_WINDOWS_TEST=reuse $(PY) -m pytest -m windows tests/windows -v

# The package list, for a CI runner that installs it with sudo first
.PHONY: print-WINDOWS_PACKAGES
print-WINDOWS_PACKAGES:
	@echo $(WINDOWS_PACKAGES)

$(WINDOWS_TOOLS): FORCE | $(PY)
	@dpkg -s $(WINDOWS_PACKAGES) >/dev/null 2>&1 || \
		{ apt-get update && apt-get install -y --no-install-recommends $(WINDOWS_PACKAGES); }
	@touch $@

# Install the Debian packages of the commands named (command:package ...) that are missing.
# dpkg-deb itself comes with dpkg.
define apt_ensure
missing=""; \
for pair in $(1); do \
	command -v $${pair%%:*} >/dev/null 2>&1 || missing="$$missing $${pair#*:}"; \
done; \
if [ -n "$$missing" ]; then \
	echo "installing$$missing"; \
	apt-get update && apt-get install -y --no-install-recommends $$missing; \
fi
endef

installer-clean:
	rm -rf installer/build dist

$(INSTALLER_TOOLS): $(INSTALLED)
	$(PIP) install --find-links $(WHEELS) -e '.[test,dev,installer]'
	touch $@

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# Build the llama-cpp-python wheel once (installer/llama_wheel.py: the release's sdist with
# installer/patches/ applied, LLAMA_CMAKE_ARGS; about 20 minutes on 2 cores); a fresh venv
# reuses it. Vulkan's shaders are compiled with glslc at build time.
$(LLAMA_WHEEL_STAMP): $(LLAMA_PATCHES) installer/llama_wheel.py | $(PY)
	@$(call apt_ensure,glslc:glslc glslangValidator:glslang-tools patch:patch)
	@dpkg -s libvulkan-dev spirv-headers >/dev/null 2>&1 || \
		{ apt-get update && apt-get install -y --no-install-recommends libvulkan-dev spirv-headers; }
	$(PY) installer/llama_wheel.py wheel --out $(WHEELS) --work $(LLAMA_BUILD)
	rm -rf $(LLAMA_BUILD)/llama_cpp_python-$(LLAMA_VERSION)
	touch $@

$(INSTALLED): pyproject.toml $(LLAMA_WHEEL_STAMP) | $(PY)
	$(PIP) install --force-reinstall --no-deps $(WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	$(PIP) install --find-links $(WHEELS) -e '.[test,dev,docs]'
	touch $@

clean:
	rm -rf $(VENV) $(PORTABLE_VENV) $(BENCH_VENV) .pytest_cache .ruff_cache *.egg-info

distclean: clean
	rm -rf $(WHEELS) $(PORTABLE_WHEELS)

# bench/api_throughput.py: ShardChat's OpenAI-compatible server against two peers on the
# same model and threads, both from the llama-cpp-python release we ship: llama.cpp's
# llama-server, built from the same patched sources with the same loadable CPU variants as
# our wheel (so both pick and run the same kernels on any machine; about 25 minutes on 2
# cores, once), and llama-cpp-python's own server in .venv-bench, from the portable wheel.
# Not part of `make test`.
BENCH_VENV := .venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_INSTALLED := $(BENCH_VENV)/.installed
LLAMA_SERVER_WORK := .cache/llama-server
LLAMA_SERVER_SRC := $(LLAMA_SERVER_WORK)/llama_cpp_python-$(LLAMA_VERSION)/vendor/llama.cpp
LLAMA_SERVER_BUILD := $(LLAMA_SERVER_WORK)/build
LLAMA_SERVER := $(LLAMA_SERVER_BUILD)/bin/llama-server
# The wheel's CPU flags without Vulkan and RPC: llama-server runs on the CPU here.
LLAMA_SERVER_CMAKE_ARGS := -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_NATIVE=OFF \
	-DBUILD_SHARED_LIBS=ON

# bench/startup.py: --help, the window (open, and ready with its model) and opening stored
# chats of 100 / 1,000 / 10,000 exchanges, each beside its baseline (issue 33's targets)
.PHONY: bench-startup
bench-startup: $(INSTALLED)
	$(PY) bench/startup.py

.PHONY: bench-api
bench-api: $(LLAMA_SERVER) $(BENCH_INSTALLED) $(INSTALLED)
	$(PY) bench/api_throughput.py

# From the sdist with installer/patches applied (the CPU variants' score is ours), each CPU
# variant a module in bin/ beside the binary, where ggml_backend_load_all() looks for them.
$(LLAMA_SERVER): $(LLAMA_SRC)/CMakeLists.txt installer/llama_wheel.py $(wildcard installer/patches/*.patch)
	@$(call apt_ensure,cmake:cmake ninja:ninja-build g++:g++ patch:patch)
	rm -rf $(LLAMA_SERVER_WORK)
	mkdir -p $(LLAMA_SERVER_WORK)
	cp $(LLAMA_SDIST) $(LLAMA_SERVER_WORK)/
	$(PY) installer/llama_wheel.py source --work $(LLAMA_SERVER_WORK)
	cmake -S $(LLAMA_SERVER_SRC) -B $(LLAMA_SERVER_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
		$(LLAMA_SERVER_CMAKE_ARGS) -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF \
		-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
		-DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF
	cmake --build $(LLAMA_SERVER_BUILD) --target llama-server -j2

# The wheel without its dependencies first, so pip never swaps it for a build from source;
# then the `server` extra's dependencies, pip seeing 0.3.36 already installed. The portable
# single-library wheel: llama-cpp-python's server never loads backend modules.
$(BENCH_INSTALLED): $(PORTABLE_WHEEL_STAMP)
	test -x $(BENCH_PY) || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install --quiet --upgrade pip
	$(BENCH_PY) -m pip install --force-reinstall --no-deps \
		$(PORTABLE_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	$(BENCH_PY) -m pip install --find-links $(PORTABLE_WHEELS) --only-binary llama-cpp-python \
		'llama-cpp-python[server]==$(LLAMA_VERSION)'
	touch $@

# bench/backend_build.py: the loadable-backend build against the portable single-library
# build ShardChat shipped before (PORTABLE_CMAKE_ARGS), side by side on the default model.
# The portable wheel is built once (about 5 minutes on 2 cores) into .venv-portable.
bench-build: $(INSTALLED) $(PORTABLE_INSTALLED)
	$(PY) bench/backend_build.py

$(PORTABLE_WHEEL_STAMP): | $(PY)
	mkdir -p $(PORTABLE_WHEELS)
	CMAKE_ARGS="$(PORTABLE_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
		$(PIP) wheel --no-deps --no-cache-dir --wheel-dir $(PORTABLE_WHEELS) \
		llama-cpp-python==$(LLAMA_VERSION)
	touch $@

$(PORTABLE_INSTALLED): $(PORTABLE_WHEEL_STAMP)
	test -x $(PORTABLE_VENV)/bin/python || $(PYTHON) -m venv $(PORTABLE_VENV)
	$(PORTABLE_VENV)/bin/pip install --quiet --force-reinstall \
		$(PORTABLE_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	touch $@
