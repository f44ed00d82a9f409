# ShardChat: `make run` starts the app, `make test` runs the whole suite.
# Both create .venv and install everything on first use, and reuse it after.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
WHEELS := .cache/wheels
LLAMA_VERSION := 0.3.36
LLAMA_WHEEL_STAMP := $(WHEELS)/.llama-cpp-python-$(LLAMA_VERSION)-portable
INSTALLED := $(VENV)/.installed
INSTALLER_TOOLS := $(VENV)/.installer-tools

# llama.cpp's default -march=native build crashes on CPUs that advertise AMX
# (see DESIGN.md); a portable build is also what installers must ship.
PORTABLE_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
	-DGGML_F16C=ON -DGGML_BMI2=ON

.PHONY: run test test-gpu lint format bench screenshots clean distclean
.PHONY: installer installer-test installer-clean

run: $(INSTALLED)
	$(VENV)/bin/shardchat gui

test: $(INSTALLED)
	$(VENV)/bin/ruff check --no-cache .
	$(VENV)/bin/ruff format --no-cache --check .
	$(VENV)/bin/mypy
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -m "not gpu"

# The GPU tier (tests/gpu) on a real Vulkan device: Mesa's software GPU (lavapipe) where
# there is no other. Its own venv, with llama-cpp-python built with Vulkan: the prebuilt
# wheel from the shared folder when it is there, else built from source (patched for
# Debian 12's Vulkan headers). llama.cpp skips CPU-type Vulkan devices unless told.
VULKAN_VENV := .venv-vulkan
VULKAN_PY := $(VULKAN_VENV)/bin/python
VULKAN_INSTALLED := $(VULKAN_VENV)/.installed
VULKAN_SHARED_WHEEL := ../shared/wheels/vulkan/llama_cpp_python-$(LLAMA_VERSION)-py3-none-linux_x86_64.whl
VULKAN_WHEELS := .cache/wheels-vulkan
VULKAN_PATCH := installer/patches/llama-cpp-python-$(LLAMA_VERSION)-vulkan-headers-1.3.239.patch
GPU_ENV := GGML_VK_VISIBLE_DEVICES=0 GGML_VK_DISABLE_F16=1 GGML_VK_DISABLE_COOPMAT=1
LLAMA_SRC := .cache/llama-src/llama_cpp_python-$(LLAMA_VERSION)/vendor/llama.cpp
FIT_PARAMS := .cache/fit-params/llama-fit-params

test-gpu: $(VULKAN_INSTALLED) $(FIT_PARAMS)
	QT_QPA_PLATFORM=offscreen $(GPU_ENV) FIT_PARAMS_TOOL=$(CURDIR)/$(FIT_PARAMS) \
		$(VULKAN_PY) -m pytest -m gpu tests/gpu -v

$(VULKAN_INSTALLED): pyproject.toml
	@$(call apt_ensure,vulkaninfo:vulkan-tools)
	@test -e /usr/share/vulkan/icd.d/lvp_icd.x86_64.json -o -e /usr/share/vulkan/icd.d/lvp_icd.json || \
		{ apt-get update && apt-get install -y --no-install-recommends mesa-vulkan-drivers libvulkan1; }
	test -x $(VULKAN_PY) || $(PYTHON) -m venv $(VULKAN_VENV)
	$(VULKAN_PY) -m pip install --quiet --upgrade pip
	if [ -f $(VULKAN_SHARED_WHEEL) ]; then \
		$(VULKAN_PY) -m pip install --force-reinstall --no-deps $(VULKAN_SHARED_WHEEL); \
	else \
		$(MAKE) vulkan-wheel && \
		$(VULKAN_PY) -m pip install --force-reinstall --no-deps $(VULKAN_WHEELS)/llama_cpp_python-*.whl; \
	fi
	$(VULKAN_PY) -m pip install --find-links $(WHEELS) -e '.[test,dev]'
	touch $@

# llama.cpp's own --fit as its tool prints it (tools/fit-params), for tests/gpu/test_fit_params.py:
# common/fit.cpp of the vendored llama.cpp, unchanged, behind tests/gpu/fit_params/main.cpp
# (the tool's printing without common/'s argument parser), linked to .venv-vulkan's libllama.
$(LLAMA_SRC)/common/fit.cpp: | $(VULKAN_INSTALLED)
	rm -rf .cache/llama-src && mkdir -p .cache/llama-src
	$(VULKAN_PY) -m pip download --quiet --no-deps --no-binary :all: -d .cache/llama-src \
		llama-cpp-python==$(LLAMA_VERSION)
	tar -xzf .cache/llama-src/llama_cpp_python-$(LLAMA_VERSION).tar.gz -C .cache/llama-src
	touch $@

$(FIT_PARAMS): tests/gpu/fit_params/main.cpp $(LLAMA_SRC)/common/fit.cpp $(VULKAN_INSTALLED)
	@$(call apt_ensure,g++:g++)
	mkdir -p $(@D)
	lib=$$($(VULKAN_PY) -c 'import llama_cpp, pathlib; print(pathlib.Path(llama_cpp.__file__).parent / "lib")') && \
	g++ -std=c++17 -O1 -I$(LLAMA_SRC)/common -I$(LLAMA_SRC)/include -I$(LLAMA_SRC)/ggml/include \
		-I$(LLAMA_SRC)/vendor tests/gpu/fit_params/main.cpp $(LLAMA_SRC)/common/fit.cpp \
		$(LLAMA_SRC)/common/log.cpp $(LLAMA_SRC)/common/json.cpp \
		-L$$lib -lllama -lggml -lggml-base -Wl,-rpath,$$lib -o $@

# From source, as ../shared/wheels/README.md describes (about 6 minutes on 2 cores).
.PHONY: vulkan-wheel
vulkan-wheel:
	@$(call apt_ensure,glslc:glslc glslangValidator:glslang-tools)
	@dpkg -s libvulkan-dev spirv-headers >/dev/null 2>&1 || \
		{ apt-get update && apt-get install -y --no-install-recommends libvulkan-dev spirv-headers; }
	rm -rf $(VULKAN_WHEELS)/src && mkdir -p $(VULKAN_WHEELS)/src
	$(VULKAN_PY) -m pip download --no-deps --no-binary :all: -d $(VULKAN_WHEELS)/src \
		llama-cpp-python==$(LLAMA_VERSION)
	tar -xzf $(VULKAN_WHEELS)/src/llama_cpp_python-$(LLAMA_VERSION).tar.gz -C $(VULKAN_WHEELS)/src
	cd $(VULKAN_WHEELS)/src/llama_cpp_python-$(LLAMA_VERSION) && patch -p1 < $(CURDIR)/$(VULKAN_PATCH)
	CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS="$(PORTABLE_CMAKE_ARGS) -DGGML_VULKAN=ON" \
		$(VULKAN_PY) -m pip wheel --no-deps -w $(VULKAN_WHEELS) \
		$(VULKAN_WHEELS)/src/llama_cpp_python-$(LLAMA_VERSION)

lint: $(INSTALLED)
	$(VENV)/bin/ruff check --no-cache .
	$(VENV)/bin/ruff format --no-cache --check .
	$(VENV)/bin/mypy

format: $(INSTALLED)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

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
installer-test: $(INSTALLER_TOOLS)
	@$(call apt_ensure,fakeroot:fakeroot readelf:binutils lintian:lintian)
	$(PY) installer/build.py
	SHARDCHAT_INSTALLER_TEST=reuse QT_QPA_PLATFORM=offscreen \
		$(PY) -m pytest -m installer tests/installer -v

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

# Build the portable llama-cpp-python wheel once; a fresh venv reuses it.
$(LLAMA_WHEEL_STAMP): | $(PY)
	mkdir -p $(WHEELS)
	CMAKE_ARGS="$(PORTABLE_CMAKE_ARGS)" $(PIP) wheel --no-deps --no-cache-dir \
		--wheel-dir $(WHEELS) llama-cpp-python==$(LLAMA_VERSION)
	touch $@

$(INSTALLED): pyproject.toml $(LLAMA_WHEEL_STAMP) | $(PY)
	$(PIP) install --force-reinstall --no-deps $(WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	$(PIP) install --find-links $(WHEELS) -e '.[test,dev]'
	touch $@

clean:
	rm -rf $(VENV) $(VULKAN_VENV) .pytest_cache .ruff_cache *.egg-info

distclean: clean
	rm -rf $(WHEELS)

# bench/api_throughput.py: ShardChat's OpenAI-compatible server against two peers on the
# same model and threads, both from the llama-cpp-python release we ship: llama.cpp's
# llama-server, built portably from the llama.cpp that release vendors (about 8 minutes
# on 2 cores, once), and llama-cpp-python's own server in .venv-bench, from the same
# portable wheel as .venv. Not part of `make test`.
BENCH_VENV := .venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_INSTALLED := $(BENCH_VENV)/.installed
LLAMA_SDIST := .cache/llama-src/llama_cpp_python-$(LLAMA_VERSION).tar.gz
LLAMA_SERVER_BUILD := .cache/llama-server/build
LLAMA_SERVER := $(LLAMA_SERVER_BUILD)/bin/llama-server

.PHONY: bench-api
bench-api: $(LLAMA_SERVER) $(BENCH_INSTALLED) $(INSTALLED)
	$(PY) bench/api_throughput.py

# From the sdist the fit.cpp rule above unpacks too, into the same place; fetched here
# only when missing (that rule starts from an empty .cache/llama-src).
$(LLAMA_SERVER): | $(PY)
	@$(call apt_ensure,cmake:cmake ninja:ninja-build g++:g++)
	test -f $(LLAMA_SDIST) || $(PIP) download --quiet --no-deps --no-binary :all: \
		-d $(dir $(LLAMA_SDIST)) llama-cpp-python==$(LLAMA_VERSION)
	test -f $(LLAMA_SRC)/CMakeLists.txt || tar -xzf $(LLAMA_SDIST) -C $(dir $(LLAMA_SDIST))
	cmake -S $(LLAMA_SRC) -B $(LLAMA_SERVER_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
		$(PORTABLE_CMAKE_ARGS) -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF \
		-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
		-DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF
	cmake --build $(LLAMA_SERVER_BUILD) --target llama-server -j2

# The wheel without its dependencies first, so pip never swaps it for a build from source;
# then the `server` extra's dependencies, pip seeing 0.3.36 already installed.
$(BENCH_INSTALLED): $(LLAMA_WHEEL_STAMP)
	test -x $(BENCH_PY) || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install --quiet --upgrade pip
	$(BENCH_PY) -m pip install --force-reinstall --no-deps \
		$(WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	$(BENCH_PY) -m pip install --find-links $(WHEELS) --only-binary llama-cpp-python \
		'llama-cpp-python[server]==$(LLAMA_VERSION)'
	touch $@
