from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent
version = {}
for line in (ROOT / 'mavit_mm' / '__init__.py').read_text().splitlines():
    if line.startswith('__version__'):
        exec(line, version)

setup(
    name='mavit_mm',
    version=version['__version__'],
    description='MAViT (Magnitude-Aware Linear Attention) backbones for mmdet and mmseg',
    long_description=(ROOT / 'README.md').read_text() if (ROOT / 'README.md').exists() else '',
    long_description_content_type='text/markdown',
    # The package alone: devtools/ (the tests' and benchmarks' instruments),
    # tools/ and benchmarks/ stay in the checkout.
    packages=find_packages(include=['mavit_mm', 'mavit_mm.*']),
    python_requires='>=3.10',
    # torch is deliberately unpinned: a user's CUDA build must stay in place.
    # scripts/setup.sh installs the full, pinned OpenMMLab stack.
    install_requires=['torch>=2.0', 'mmengine>=0.10.7', 'numpy'],
    extras_require={
        'det': ['mmcv==2.1.0', 'mmdet==3.3.0', 'pycocotools'],
        'seg': ['mmcv==2.1.0', 'mmsegmentation==1.2.2', 'ftfy', 'regex'],
        'triton': ['triton>=3.2,<3.10'],  # mavit_mm/ops/triton_support.py: SUPPORTED_TRITON
        'tests': ['pytest'],
    },
    license='Apache-2.0',
)
