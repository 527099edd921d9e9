"""oneflowlike: train one model on many devices. ``import oneflowlike as flow``."""

from oneflowlike import _C
from oneflowlike._C import Tensor, device, dtype
from oneflowlike._C import get_num_threads, set_num_threads  # noqa: F401 (torch's names)

_DTYPE_NAMES = {value.value: name for name, value in dtype.__members__.items()}
dtype.__repr__ = dtype.__str__ = lambda self: f"oneflowlike.{_DTYPE_NAMES[self.value]}"

float32 = dtype.float32
float64 = dtype.float64
float16 = dtype.float16
bfloat16 = dtype.bfloat16
int8 = dtype.int8
int32 = dtype.int32
int64 = dtype.int64
bool = dtype.bool  # noqa: A001 (same name as torch.bool / oneflow.bool)
float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001

from oneflowlike import ops as _ops  # noqa: E402
from oneflowlike.ops import *  # noqa: E402,F401,F403
from oneflowlike.autograd import (enable_grad, inference_mode, is_grad_enabled, no_grad,  # noqa: E402,F401
                                  set_grad_enabled)
from oneflowlike import autograd  # noqa: E402,F401
from oneflowlike import nn  # noqa: E402,F401
from oneflowlike import optim  # noqa: E402,F401
from oneflowlike import return_types  # noqa: E402,F401

_ops.attach_tensor_methods(Tensor)

from oneflowlike import env  # noqa: E402,F401
from oneflowlike import distributed  # noqa: E402,F401
from oneflowlike import cuda  # noqa: E402,F401
from oneflowlike import comm  # noqa: E402,F401
from oneflowlike import amp  # noqa: E402,F401
from oneflowlike import utils  # noqa: E402,F401
from oneflowlike.amp import autocast  # noqa: E402,F401
from oneflowlike import sbp  # noqa: E402,F401
from oneflowlike.placement import placement  # noqa: E402,F401
from oneflowlike.framework.global_tensor import GlobalTensor  # noqa: E402,F401
from oneflowlike.framework.checkpoint import async_save, load, save  # noqa: E402,F401
from oneflowlike.framework.meta import device  # noqa: E402,F401,F811 ("meta", else _C.device)
from oneflowlike.framework import tensor_methods as _tensor_methods  # noqa: E402
import sys as _sys  # noqa: E402

_tensor_methods.install(_sys.modules[__name__])
from oneflowlike.framework import tensor_copy as _tensor_copy  # noqa: E402

_tensor_copy.install()
from oneflowlike.framework import grad_hooks as _grad_hooks  # noqa: E402

_grad_hooks.install()
from oneflowlike import linalg  # noqa: E402,F401

__version__ = "0.1.0"
