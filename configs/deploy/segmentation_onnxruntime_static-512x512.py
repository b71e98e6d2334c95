# Semantic FPN / UperNet + MAViT to ONNX Runtime, static 512x512 input.
# UperNet's pyramid pooling is exported exactly (mavit_mm.deploy replaces
# mmdeploy's avg_pool2d approximation of adaptive pooling).
_base_ = ['./_base_/onnxruntime_opset11.py']
onnx_config = dict(input_shape=[512, 512])
codebase_config = dict(type='mmseg', task='Segmentation', with_argmax=True)
